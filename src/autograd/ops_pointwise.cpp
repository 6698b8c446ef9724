// Pointwise ops: add, mul, scale, bias add, GELU, ReLU, dropout.
#include <stdexcept>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace mantissa::autograd {
namespace {
void same_shape(const char* op, const Var& a, const Var& b) {
  if (a.shape() != b.shape())
    throw std::invalid_argument(std::string(op) + ": shapes differ: " + shape_str(a.shape()) + " and " +
                                shape_str(b.shape()));
}
}  // namespace

// out = a + b; da += dout, db += dout (the same gradient tensor is shared, copy-on-write).
Var add(Tape& t, const Var& a, const Var& b) {
  same_shape("add", a, b);
  Tensor y = Tensor::empty(a.shape());
  kernels::add(y.f32(), a.value.f32(), b.value.f32(), a.numel());
  const bool record = t.wants_grad({&a, &b});
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([an = a.node, bn = b.node, on = out.node]() {
      if (!on->has_grad()) return;
      if (an) an->accumulate(on->grad);
      if (bn) bn->accumulate(on->grad);
    });
  return out;
}

// out = a * b; da += dout * b, db += dout * a.
Var mul(Tape& t, const Var& a, const Var& b) {
  same_shape("mul", a, b);
  const int64_t n = a.numel();
  Tensor y = Tensor::empty(a.shape());
  kernels::mul(y.f32(), a.value.f32(), b.value.f32(), n);
  const bool record = t.wants_grad({&a, &b});
  Var out = Tape::result(std::move(y), record);
  if (!record) return out;
  Tensor a_saved = b.node ? t.save_compact(a.value) : Tensor();
  Tensor b_saved = a.node ? t.save_compact(b.value) : Tensor();
  t.record([=, an = a.node, bn = b.node, on = out.node]() {
    if (!on->has_grad()) return;
    Tensor tmp = Tensor::empty(on->shape);
    if (an) {
      kernels::mul(tmp.f32(), on->grad.f32(), Tape::restore(b_saved).f32(), n);
      an->accumulate(tmp);
    }
    if (bn) {
      if (an) tmp = Tensor::empty(on->shape);
      kernels::mul(tmp.f32(), on->grad.f32(), Tape::restore(a_saved).f32(), n);
      bn->accumulate(tmp);
    }
  });
  return out;
}

// out = alpha x; dx += alpha dout.
Var scale(Tape& t, const Var& x, float alpha) {
  Tensor y = Tensor::empty(x.shape());
  kernels::scale(y.f32(), x.value.f32(), alpha, x.numel());
  const bool record = t.wants_grad({&x});
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([alpha, xn = x.node, on = out.node]() {
      if (on->has_grad()) xn->accumulate_scaled(on->grad, alpha);
    });
  return out;
}

Var scale_split(Tape& t, const Var& x, float alpha, float beta) {
  Tensor y = Tensor::empty(x.shape());
  kernels::scale(y.f32(), x.value.f32(), alpha, x.numel());
  const bool record = t.wants_grad({&x});
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([beta, xn = x.node, on = out.node]() {
      if (on->has_grad()) xn->accumulate_scaled(on->grad, beta);
    });
  return out;
}

// x [N, C] (leading dims flattened) + b [C]; dx += dout, db += column sums.
Var add_bias(Tape& t, const Var& x, const Var& b) {
  if (b.value.ndim() != 1 || x.value.ndim() < 1 || x.dim(-1) != b.dim(0))
    throw std::invalid_argument("add_bias: bias " + shape_str(b.shape()) + " does not match input " + shape_str(x.shape()));
  const int64_t C = b.dim(0), N = x.numel() / C;
  Tensor y = Tensor::empty(x.shape());
  kernels::bias_add(y.f32(), x.value.f32(), b.value.f32(), N, C);
  const bool record = t.wants_grad({&x, &b});
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([N, C, xn = x.node, bn = b.node, on = out.node]() {
      if (!on->has_grad()) return;
      if (bn) kernels::bias_backward(bn->buffer().f32(), on->grad.f32(), N, C);
      if (xn) xn->accumulate(on->grad);
    });
  return out;
}

// GELU (either form) and ReLU keep their input (under the saved-activation policy).
namespace {
// `consume`: x is an rvalue the caller gives up, so when nothing else holds
// its buffer and the saved copy is not x itself, the output is written over
// it (one [n] fp32 buffer less at the forward peak: the MLP's 4C-wide input).
Var gelu_op(Tape& t, const Var& x, bool consume, GeluForm form, float forward = 1.0f, float backward = 1.0f) {
  const int64_t n = x.numel();
  const bool record = t.wants_grad({&x});
  Tensor saved = record ? t.save_compact(x.value) : Tensor();
  const bool reuse = consume && x.value.dtype() == DType::f32 && x.value.storage_unique() &&
                     !(record && saved.same_storage(x.value));
  Tensor y = reuse ? x.value : Tensor::empty(x.shape());
  kernels::gelu_forward(y.f32(), x.value.f32(), n, forward, form);  // elementwise: y may be x
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([n, saved, backward, form, xn = x.node, on = out.node]() {
      if (!on->has_grad()) return;
      // When x has no gradient yet and nothing else holds the output's, dx is
      // written over dout: one [n] fp32 buffer less at the backward peak and
      // no zero fill.
      const bool in_place = !xn->has_grad() && on->grad.storage_unique();
      float* dx = in_place ? on->grad.f32() : xn->buffer().f32();
      if (dtype_size(saved.dtype()) == 1) {  // decoded on the fly, no restored copy
        kernels::gelu_backward_codes(dx, saved.data<uint8_t>(), Tape::decode_table(saved.dtype()), saved.scale(),
                                     on->grad.f32(), n, !in_place, backward, form);
      } else {
        const bool bf16x = saved.dtype() == DType::bf16;  // widened on the fly, no fp32 copy
        const Tensor xs = bf16x ? saved : Tape::restore(saved);
        if (bf16x)
          (in_place ? kernels::gelu_backward_bf16x_into : kernels::gelu_backward_bf16x)(dx, xs.data<uint16_t>(),
                                                                                        on->grad.f32(), n, backward, form);
        else
          (in_place ? kernels::gelu_backward_into : kernels::gelu_backward)(dx, xs.f32(), on->grad.f32(), n, backward,
                                                                            form);
      }
      if (in_place) {
        xn->accumulate(on->grad.view(xn->shape));  // adopted, not copied
        on->grad = Tensor();
      }
    });
  return out;
}
}  // namespace

Var gelu(Tape& t, const Var& x, GeluForm form) { return gelu_op(t, x, false, form); }
Var gelu(Tape& t, Var&& x, GeluForm form) { return gelu_op(t, x, true, form); }
Var scaled_gelu(Tape& t, Var&& x, float forward, float backward, GeluForm form) {
  return gelu_op(t, x, true, form, forward, backward);
}

Var relu(Tape& t, const Var& x) {
  const int64_t n = x.numel();
  Tensor y = Tensor::empty(x.shape());
  kernels::relu_forward(y.f32(), x.value.f32(), n);
  const bool record = t.wants_grad({&x});
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([n, saved = t.save_compact(x.value), xn = x.node, on = out.node]() {
      if (!on->has_grad()) return;
      kernels::relu_backward(xn->buffer().f32(), Tape::restore(saved).f32(), on->grad.f32(), n);
    });
  return out;
}

// The mask is recomputed from (seed, call number) in backward: nothing saved.
Var dropout(Tape& t, const Var& x, float p) {
  if (!(p >= 0.0f && p < 1.0f)) throw std::invalid_argument("dropout: p must be in [0, 1), got " + std::to_string(p));
  if (!t.ctx().training || p == 0.0f) return x;
  const int64_t n = x.numel();
  const uint64_t seed = t.ctx().seed, call = t.ctx().dropout_calls++;
  Tensor y = Tensor::empty(x.shape());
  kernels::dropout_forward(y.f32(), x.value.f32(), p, seed, call, n);
  const bool record = t.wants_grad({&x});
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([=, xn = x.node, on = out.node]() {
      if (!on->has_grad()) return;
      kernels::dropout_backward(xn->buffer().f32(), on->grad.f32(), p, seed, call, n);
    });
  return out;
}

}  // namespace mantissa::autograd
