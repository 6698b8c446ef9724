// Matrix-product ops: linear (Conv1D layout), matmul, batched matmul.
// Operands go to the kernel in the policy's matmul dtype (bf16: weights cast
// once per version through the tape's CastCache); accumulation is fp32.
// With an OperandQuantiser in the policy (FP8 recipes) the operands are cast
// to real 1-byte tensors instead and multiplied exactly through bf16 (see
// cast_product below and quant/fp8.hpp).
#include <stdexcept>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/kernels/matmul.hpp"
#include "mantissa/cpu/profile.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/autograd/parameter.hpp"

namespace mantissa::autograd {
namespace {

// A stored tensor (fp32 activation, saved copy, cast weight) in dtype `want`.
Tensor in_dtype(const Tensor& x, DType want) {
  if (x.dtype() == want) return x;
  return x.to(want, MemoryKind::workspace);
}

// An operand of a product computed in `compute`: converted to it, except that
// fp16 goes to an fp32 product as it is (the kernel widens it exactly, a
// cached weight once per version).
Tensor operand_in(const Tensor& x, DType compute) {
  if (compute == DType::f32 && x.dtype() == DType::f16) return x;
  return in_dtype(x, compute);
}

// The output gradient as both products of a backward pass take it: in
// `compute`, except for fp16 products, which get it rounded to fp16 values
// once and kept in fp32: the kernel multiplies fp16 operands as their exact
// fp32 values anyway (kernels/matmul.cpp), so neither product has to widen an
// fp16 copy again and both see the same values. Returns the dtype the
// products then run in.
DType grad_operand(const Tensor& g, DType compute, Tensor* out) {
  if (compute != DType::f16) {
    *out = in_dtype(g, compute);
    return compute;
  }
  cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  *out = Tensor::empty(g.shape(), DType::f32, MemoryKind::workspace);
  static const formats::Format& fp16 = formats::preset("fp16");
  formats::fake_quantize(fp16, g.f32(), out->f32(), static_cast<size_t>(g.numel()));
  return DType::f32;
}

// C [batch, M, N] (+)= alpha * op(A) @ op(B), operands as operand_in gives them.
// A weight B (b_key set: its Parameter, or the quantiser's cached decode) is
// packed once per version, as in the forward product.
void gemm(DType compute, int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
          const Tensor& A, const Tensor& B, float* C, float alpha, bool accumulate,
          const void* b_key = nullptr, int b_version = 0) {
  // fp16 operands go to the kernel as they are: it widens them exactly (a
  // cached weight once per version), and every product of two fp16 values is
  // exact in fp32, so the products come out as on fp16 hardware.
  Tensor a = operand_in(A, compute), b = operand_in(B, compute);
  kernels::MatmulArgs args = kernels::MatmulArgs::product(M, N, K, ta, tb)
                                 .with_batch(batch)
                                 .with_types(a.dtype(), b.dtype())
                                 .with_alpha(alpha)
                                 .with_accumulate(accumulate);
  if (b_key) args.with_constant_b(b_key, b_version);
  kernels::matmul(args, a.raw(), b.raw(), C);
}

// What a product keeps of an operand for the backward pass: the operand in
// the matmul dtype when that is low precision (it was made anyway), otherwise
// the fp32 value under the saved-activation policy.
Tensor keep_operand(Tape& t, const Tensor& fp32, const Tensor& compute_operand) {
  if (compute_operand.dtype() != DType::f32) return compute_operand;
  return t.save(fp32);
}

// ---- cast products (FP8) ---------------------------------------------------------------------
// One operand of a cast product: the 1-byte codes (kept for the backward
// pass), their exact bf16 decode and the per-tensor scale that goes to alpha;
// or, when the forward pass is not cast, the plain operand as without casts.
struct CastOperand {
  QuantisedOperand q;      // defined when cast
  Tensor decoded;          // decode of q, bf16 or f32 (weights: the quantiser's cached one)
  const void* cache_key = nullptr;
  int cache_version = 0;
  Tensor plain;            // not cast: the operand in the policy's matmul dtype
  float scale() const { return q.defined() ? q.codes.scale() : 1.0f; }
  // The scale of what the backward product multiplies (backward_operand).
  float backward_scale() const { return q.backward.defined() ? q.backward.scale() : scale(); }
};

// x stored as [batch, rows, cols] with the contraction along `axis` (1 rows, 2 cols).
CastOperand forward_operand(Tape& t, OperandQuantiser& q, const Var& x, int64_t batch, int axis, QuantSite site,
                            bool batched) {
  CastOperand op;
  if (!q.casts_forward()) {
    op.plain = t.matmul_operand(x);
    return op;
  }
  if (x.param && !batched) {
    site.role = OperandRole::weight;
    OperandQuantiser::Weight w = q.quantise_weight(*x.param, axis, site);
    op.q = std::move(w.operand);
    op.decoded = std::move(w.decoded);
    op.cache_key = w.cache_key;
    op.cache_version = w.cache_version;
    return op;
  }
  site.role = OperandRole::activation;
  op.q = q.quantise(x.value, batch, x.dim(-2), x.dim(-1), axis, site, &op.decoded);
  return op;
}

// What the backward pass keeps of an operand: the codes (1 byte) of a cast
// activation, the cached decode of a cast weight, else as keep_operand.
CastOperand kept_operand(Tape& t, const Var& x, CastOperand op) {
  if (op.q.defined()) {
    if (op.q.backward.defined()) op.cache_key = nullptr;  // the backward product multiplies q.backward
    if (!(x.param && op.cache_key)) op.decoded = Tensor();  // decoded again in backward
    return op;
  }
  op.plain = keep_operand(t, x.value, op.plain);
  return op;
}

// The operand for a backward GEMM (the decode or the kept plain operand).
Tensor backward_operand(const OperandQuantiser& q, const CastOperand& op) {
  if (!op.q.defined()) return op.plain;
  if (op.q.packed) return q.decode(op.q);
  if (op.q.backward.defined()) return op.q.backward;
  return op.decoded.defined() ? op.decoded : q.decode(op.q);
}

// The dtype two decoded operands are multiplied in: bf16 when both are bf16,
// else f32 (a bf16 operand widens exactly).
DType decoded_compute(const Tensor& a, const Tensor& b) {
  return a.dtype() == DType::bf16 && b.dtype() == DType::bf16 ? DType::bf16 : DType::f32;
}

// c [batch, M, N] = forward * op(a) @ op(b) (+ bias [N]) with cast operands;
// backward as product() below, the output gradient cast when the quantiser
// casts backward. Decoded FP8 operands are exact in bf16, so products of two
// of them run in bf16 (fp32 accumulation); a product with an uncast operand
// runs in the policy's dtype (fp32 when that is f16, which cannot hold every
// scaled FP8 value).
Var cast_product(Tape& t, const Var& a, const Var& b, const Var* bias, bool ta, bool tb, const OpScales& s,
                 bool batched, int64_t batch, int64_t M, int64_t N, int64_t K, Shape out_shape) {
  const std::shared_ptr<OperandQuantiser> qp = t.policy().quantiser;
  QuantSite site;
  if (!batched) site.key = b.param ? static_cast<const void*>(b.param) : static_cast<const void*>(a.param);
  if (!site.key) site.ordinal = t.ctx().quant_calls++;
  site.record = grad_enabled();
  const CastOperand ao = forward_operand(t, *qp, a, batch, ta ? 1 : 2, site, batched);
  const CastOperand bo = forward_operand(t, *qp, b, batch, tb ? 2 : 1, site, batched);
  const DType policy_dtype = t.policy().matmul;
  const DType cast_compute = policy_dtype == DType::bf16 ? DType::bf16 : DType::f32;

  Tensor c = Tensor::empty(out_shape);
  kernels::MatmulArgs args =
      kernels::MatmulArgs::product(M, N, K, ta, tb).with_batch(batch).with_alpha(s.forward * ao.scale() * bo.scale());
  const float* bias_data = bias ? bias->value.f32() : nullptr;
  if (qp->casts_forward()) {
    const DType mixed = decoded_compute(ao.decoded, bo.decoded);
    const Tensor ak = in_dtype(ao.decoded, mixed), bk = in_dtype(bo.decoded, mixed);
    args.with_types(mixed, mixed);
    if (bo.cache_key && bk.dtype() == bo.decoded.dtype()) args.with_constant_b(bo.cache_key, bo.cache_version);
    kernels::matmul(args, ak.raw(), bk.raw(), c.f32(), bias_data);
  } else {
    const Tensor& ak = ao.plain;
    const Tensor& bk = bo.plain;
    args.a_type = ak.dtype();
    args.b_type = bk.dtype();
    kernels::matmul(args, ak.raw(), bk.raw(), c.f32(), bias_data);
  }

  const bool record = t.wants_grad({&a, &b, bias});
  Var out = Tape::result(std::move(c), record);
  if (!record) return out;
  const CastOperand a_kept = b.node ? kept_operand(t, a, ao) : CastOperand{};
  const CastOperand b_kept = a.node ? kept_operand(t, b, bo) : CastOperand{};
  const DType compute = qp->casts_forward() ? cast_compute : policy_dtype;
  t.record([=, an = a.node, bn = b.node, biasn = bias ? bias->node : nullptr, on = out.node]() {
    if (!on->has_grad()) return;
    // dC [batch, M, N], cast with the contraction of dA = dC op(B)^T (N) along its rows.
    QuantisedOperand dq;
    Tensor dc;
    DType dtype = compute;
    if (qp->casts_backward()) {
      QuantSite gsite = site;
      gsite.role = OperandRole::grad_output;
      gsite.record = true;
      gsite.keep_codes = false;  // only the decode dc and the scale are used
      dq = qp->quantise(on->grad, batch, M, N, 2, gsite, &dc);
      if (!qp->casts_forward()) dtype = policy_dtype == DType::f16 ? DType::f32 : policy_dtype;
    } else {
      dc = in_dtype(on->grad, compute);
    }
    const float sdc = dq.defined() ? dq.codes.scale() : 1.0f;
    if (an) {
      const Tensor bb = backward_operand(*qp, b_kept);
      bool has = false;
      Tensor& da = an->writable(&has);
      const float alpha = s.backward * sdc * b_kept.backward_scale();
      const DType dt = dq.defined() && b_kept.q.defined() ? decoded_compute(dc, bb) : dtype;
      if (!ta)  // dA [M, K] = dC [M, N] @ op(B)^T; a cached weight decode stays packed
        gemm(dt, batch, M, K, N, false, !tb, dc, bb, da.f32(), alpha, has,
             bb.dtype() == dt ? b_kept.cache_key : nullptr, b_kept.cache_version);
      else      // dA [K, M] = op(B) [K, N] @ dC^T
        gemm(dt, batch, K, M, N, tb, true, bb, dc, da.f32(), alpha, has);
    }
    if (bn) {
      const Tensor aa = backward_operand(*qp, a_kept);
      bool has = false;
      Tensor& db = bn->writable(&has);
      Tensor dcw = dc;  // dC as this product multiplies it
      float sdcw = sdc;
      if (dq.defined() && qp->separate_wgrad()) {  // cast again, blocked along this product's contraction (M)
        QuantSite ws = site;
        ws.role = OperandRole::grad_output;
        ws.record = true;
        ws.keep_codes = false;
        ws.wgrad = true;
        sdcw = qp->quantise(on->grad, batch, M, N, 1, ws, &dcw).codes.scale();
      }
      const float alpha = s.weight * sdcw * a_kept.backward_scale();
      const DType dt = dq.defined() && a_kept.q.defined() ? decoded_compute(dcw, aa) : dtype;
      if (!tb)  // dB [K, N] = op(A)^T @ dC
        gemm(dt, batch, K, N, M, !ta, false, aa, dcw, db.f32(), alpha, has);
      else      // dB [N, K] = dC^T @ op(A)
        gemm(dt, batch, N, K, M, true, ta, dcw, aa, db.f32(), alpha, has);
    }
    if (biasn) {  // db [N] += weight * column sums of the uncast dC (as Transformer Engine)
      Tensor g = Tensor::zeros({N});
      kernels::bias_backward(g.f32(), on->grad.f32(), batch * M, N);
      biasn->accumulate_scaled(g, s.weight);
    }
  });
  return out;
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
  if (t.policy().quantiser) {
    // x viewed as [M, K]: a 2-D product whose output takes x's leading dims.
    const Var x2 = x.value.ndim() == 2 ? x : Var{x.value.view({M, K}), x.node, x.param};
    return cast_product(t, x2, w, b, false, false, s, false, 1, M, N, K, std::move(out_shape));
  }

  const DType compute = t.policy().matmul;
  Tensor xa = t.matmul_operand(x);
  Tensor wb = t.matmul_operand(w);
  const Tensor& xk = xa;
  const Tensor& wk = wb;
  Tensor y = Tensor::empty(out_shape);
  kernels::MatmulArgs args =
      kernels::MatmulArgs::product(M, N, K).with_types(xk.dtype(), wk.dtype()).with_alpha(s.forward);
  if (w.param) args.with_constant_b(w.param, w.param->version);
  kernels::matmul(args, xk.raw(), wk.raw(), y.f32(), b ? b->value.f32() : nullptr);

  const bool record = t.wants_grad({&x, &w, b});
  Var out = Tape::result(std::move(y), record);
  if (!record) return out;
  Tensor x_saved = w.node ? keep_operand(t, x.value, xa) : Tensor();
  Tensor w_saved = x.node ? wb : Tensor();
  const int w_version = w.param ? w.param->version : 0;
  t.record([=, wp = w.param, xn = x.node, wn = w.node, bn = b ? b->node : nullptr, on = out.node]() {
    if (!on->has_grad()) return;
    Tensor dy;  // converted once for both products
    const DType dt = grad_operand(on->grad, compute, &dy);
    if (xn) {  // dx [M, K] (+)= backward * dy [M, N] @ w^T
      bool has = false;
      Tensor& dx = xn->writable(&has);
      gemm(dt, 1, M, K, N, false, true, dy, w_saved, dx.f32(), s.backward, has, wp, w_version);
    }
    if (wn) {  // dw [K, N] (+)= weight * x^T [K, M] @ dy [M, N]
      bool has = false;
      Tensor& dw = wn->writable(&has);
      gemm(dt, 1, K, N, M, true, false, x_saved, dy, dw.f32(), s.weight, has);
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
  Shape out_shape = batched ? Shape{batch, M, N} : Shape{M, N};
  if (t.policy().quantiser) return cast_product(t, a, b, nullptr, ta, tb, s, batched, batch, M, N, K, std::move(out_shape));
  const DType compute = t.policy().matmul;
  Tensor av = t.matmul_operand(a), bv = t.matmul_operand(b);
  Tensor c = Tensor::empty(out_shape);
  gemm(compute, batch, M, N, K, ta, tb, av, bv, c.f32(), s.forward, false);

  const bool record = t.wants_grad({&a, &b});
  Var out = Tape::result(std::move(c), record);
  if (!record) return out;
  Tensor a_saved = b.node ? keep_operand(t, a.value, av) : Tensor();
  Tensor b_saved = a.node ? keep_operand(t, b.value, bv) : Tensor();
  t.record([=, an = a.node, bn = b.node, on = out.node]() {
    if (!on->has_grad()) return;
    Tensor dc;  // converted once for both products
    const DType dt = grad_operand(on->grad, compute, &dc);
    if (an) {
      bool has = false;
      Tensor& da = an->writable(&has);
      if (!ta)  // dA [M, K] = dC [M, N] @ op(B)^T
        gemm(dt, batch, M, K, N, false, !tb, dc, b_saved, da.f32(), s.backward, has);
      else      // dA [K, M] = op(B) [K, N] @ dC^T
        gemm(dt, batch, K, M, N, tb, true, b_saved, dc, da.f32(), s.backward, has);
    }
    if (bn) {
      bool has = false;
      Tensor& db = bn->writable(&has);
      if (!tb)  // dB [K, N] = op(A)^T @ dC
        gemm(dt, batch, K, N, M, !ta, false, a_saved, dc, db.f32(), s.weight, has);
      else      // dB [N, K] = dC^T @ op(A)
        gemm(dt, batch, N, K, M, true, ta, dc, a_saved, db.f32(), s.weight, has);
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
