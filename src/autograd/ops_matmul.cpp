// Matrix-product ops: linear (Conv1D layout), matmul, batched matmul.
// Operands go to the kernel in the policy's matmul dtype (bf16: weights cast
// once per version through the tape's CastCache); accumulation is fp32.
#include <stdexcept>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/kernels/matmul.hpp"
#include "mantissa/nn/module.hpp"

namespace mantissa::autograd {
namespace {

// A stored tensor (fp32 activation, saved copy, cast weight) in dtype `want`.
Tensor in_dtype(const Tensor& x, DType want) {
  if (x.dtype() == want) return x;
  return x.to(want, MemoryKind::workspace);
}

// The kernel multiplies f32 or bf16. An fp16 operand is widened to f32, which
// is exact, and every product of two fp16 values is exact in fp32, so fp16
// matrix products with fp32 accumulation come out as on fp16 hardware; the
// operand stays stored in 2 bytes wherever it is kept.
Tensor kernel_operand(const Tensor& x) {
  if (x.dtype() == DType::f16) return x.to(DType::f32, MemoryKind::workspace);
  return x;
}

// C [batch, M, N] (+)= alpha * op(A) @ op(B), operands converted to `compute`.
void gemm(DType compute, int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
          const Tensor& A, const Tensor& B, float* C, float alpha, bool accumulate) {
  Tensor a = kernel_operand(in_dtype(A, compute)), b = kernel_operand(in_dtype(B, compute));
  kernels::MatmulArgs args;
  args.batch = batch;
  args.M = M;
  args.N = N;
  args.K = K;
  args.trans_a = ta;
  args.trans_b = tb;
  args.a_type = a.dtype();
  args.b_type = b.dtype();
  args.alpha = alpha;
  args.accumulate = accumulate;
  kernels::matmul(args, a.raw(), b.raw(), C);
}

// What a product keeps of an operand for the backward pass: the operand in
// the matmul dtype when that is low precision (it was made anyway), otherwise
// the fp32 value under the saved-activation policy.
Tensor keep_operand(const Tape& t, const Tensor& fp32, const Tensor& compute_operand) {
  if (compute_operand.dtype() != DType::f32) return compute_operand;
  return t.save(fp32);
}

}  // namespace

// ---- linear ---------------------------------------------------------------------------
// x [M, K] (leading dims flattened), w [K, N], b [N], y [M, N] = forward * x @ w + b.
Var linear(Tape& t, const Var& x, const Var& w, const Var* b, const OpScales& s) {
  if (w.value.ndim() != 2) throw std::invalid_argument("linear: weight must be [in, out], got " + shape_str(w.shape()));
  const int64_t K = w.dim(0), N = w.dim(1);
  if (x.value.ndim() < 1 || x.dim(-1) != K)
    throw std::invalid_argument("linear: input " + shape_str(x.shape()) + " does not match weight " + shape_str(w.shape()));
  if (b && (b->value.ndim() != 1 || b->dim(0) != N))
    throw std::invalid_argument("linear: bias " + shape_str(b->shape()) + " does not match weight " + shape_str(w.shape()));
  const int64_t M = x.numel() / K;
  Shape out_shape = x.shape();
  out_shape.back() = N;

  const DType compute = t.policy().matmul;
  Tensor xa = t.matmul_operand(x);
  Tensor wb = t.matmul_operand(w);
  const Tensor xk = kernel_operand(xa), wk = kernel_operand(wb);
  Tensor y = Tensor::empty(out_shape);
  kernels::MatmulArgs args;
  args.M = M;
  args.N = N;
  args.K = K;
  args.a_type = xk.dtype();
  args.b_type = wk.dtype();
  args.alpha = s.forward;
  if (w.param) {
    args.b_is_constant = true;
    args.b_cache_key = w.param;
    args.b_cache_version = w.param->version;
  }
  kernels::matmul(args, xk.raw(), wk.raw(), y.f32(), b ? b->value.f32() : nullptr);

  const bool record = t.wants_grad({&x, &w, b});
  Var out = Tape::result(std::move(y), record);
  if (!record) return out;
  Tensor x_saved = w.node ? keep_operand(t, x.value, xa) : Tensor();
  Tensor w_saved = x.node ? wb : Tensor();
  t.record([=, xn = x.node, wn = w.node, bn = b ? b->node : nullptr, on = out.node]() {
    if (!on->has_grad()) return;
    const Tensor dy = in_dtype(on->grad, compute);  // converted once for both products
    if (xn) {  // dx [M, K] (+)= backward * dy [M, N] @ w^T
      bool has = false;
      Tensor& dx = xn->writable(&has);
      gemm(compute, 1, M, K, N, false, true, dy, w_saved, dx.f32(), s.backward, has);
    }
    if (wn) {  // dw [K, N] (+)= weight * x^T [K, M] @ dy [M, N]
      bool has = false;
      Tensor& dw = wn->writable(&has);
      gemm(compute, 1, K, N, M, true, false, x_saved, dy, dw.f32(), s.weight, has);
    }
    if (bn) {  // db [N] += weight * column sums of dy
      if (s.weight == 1.0f) {
        kernels::bias_backward(bn->buffer().f32(), on->grad.f32(), M, N);
      } else {
        Tensor db = Tensor::zeros({N});
        kernels::bias_backward(db.f32(), on->grad.f32(), M, N);
        bn->accumulate_scaled(db, s.weight);
      }
    }
  });
  return out;
}

// ---- matmul / bmm ------------------------------------------------------------------------
namespace {
// c [batch, M, N] = forward * op(a) @ op(b); backward (C' = A' B'):
//   dA' = dC B'^T, dB' = A'^T dC, written in each operand's stored orientation.
Var product(Tape& t, const Var& a, const Var& b, bool ta, bool tb, const OpScales& s, bool batched) {
  const int nd = batched ? 3 : 2;
  if (a.value.ndim() != nd || b.value.ndim() != nd)
    throw std::invalid_argument(std::string(batched ? "bmm" : "matmul") + ": operands must be " +
                                (batched ? "3-D" : "2-D") + ", got " + shape_str(a.shape()) + " and " +
                                shape_str(b.shape()));
  const int64_t batch = batched ? a.dim(0) : 1;
  if (batched && b.dim(0) != batch)
    throw std::invalid_argument("bmm: batch sizes differ: " + shape_str(a.shape()) + " and " + shape_str(b.shape()));
  const int64_t M = ta ? a.dim(-1) : a.dim(-2), K = ta ? a.dim(-2) : a.dim(-1);
  const int64_t Kb = tb ? b.dim(-1) : b.dim(-2), N = tb ? b.dim(-2) : b.dim(-1);
  if (K != Kb)
    throw std::invalid_argument(std::string(batched ? "bmm" : "matmul") + ": inner dimensions differ: " +
                                shape_str(a.shape()) + (ta ? "^T" : "") + " x " + shape_str(b.shape()) + (tb ? "^T" : ""));
  const DType compute = t.policy().matmul;
  Tensor av = t.matmul_operand(a), bv = t.matmul_operand(b);
  Shape out_shape = batched ? Shape{batch, M, N} : Shape{M, N};
  Tensor c = Tensor::empty(out_shape);
  gemm(compute, batch, M, N, K, ta, tb, av, bv, c.f32(), s.forward, false);

  const bool record = t.wants_grad({&a, &b});
  Var out = Tape::result(std::move(c), record);
  if (!record) return out;
  Tensor a_saved = b.node ? keep_operand(t, a.value, av) : Tensor();
  Tensor b_saved = a.node ? keep_operand(t, b.value, bv) : Tensor();
  t.record([=, an = a.node, bn = b.node, on = out.node]() {
    if (!on->has_grad()) return;
    const Tensor dc = in_dtype(on->grad, compute);  // converted once for both products
    if (an) {
      bool has = false;
      Tensor& da = an->writable(&has);
      if (!ta)  // dA [M, K] = dC [M, N] @ op(B)^T
        gemm(compute, batch, M, K, N, false, !tb, dc, b_saved, da.f32(), s.backward, has);
      else      // dA [K, M] = op(B) [K, N] @ dC^T
        gemm(compute, batch, K, M, N, tb, true, b_saved, dc, da.f32(), s.backward, has);
    }
    if (bn) {
      bool has = false;
      Tensor& db = bn->writable(&has);
      if (!tb)  // dB [K, N] = op(A)^T @ dC
        gemm(compute, batch, K, N, M, !ta, false, a_saved, dc, db.f32(), s.weight, has);
      else      // dB [N, K] = dC^T @ op(A)
        gemm(compute, batch, N, K, M, true, ta, dc, a_saved, db.f32(), s.weight, has);
    }
  });
  return out;
}
}  // namespace

Var matmul(Tape& t, const Var& a, const Var& b, bool trans_a, bool trans_b, const OpScales& s) {
  return product(t, a, b, trans_a, trans_b, s, false);
}
Var bmm(Tape& t, const Var& a, const Var& b, bool trans_a, bool trans_b, const OpScales& s) {
  return product(t, a, b, trans_a, trans_b, s, true);
}

}  // namespace mantissa::autograd
