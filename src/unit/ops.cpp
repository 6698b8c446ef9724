// Unit-scaled ops: residual split/add, scaled activations, norms, u-muP
// attention, embeddings and losses with their forward and backward scales
// applied in the pass that computes them (see unit/ops.hpp).
#include "mantissa/unit/ops.hpp"

#include <omp.h>

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <utility>
#include <vector>

#include "mantissa/cpu/profile.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace mantissa::unit {
namespace {

float f(double v) { return static_cast<float>(v); }

void need_bwd(const unit::Scales& s, size_t n, const char* op) {
  if (s.bwd.size() < n)
    throw std::invalid_argument(std::string(op) + ": expected " + std::to_string(n) + " backward scales, got " +
                                std::to_string(s.bwd.size()));
}

}  // namespace

autograd::OpScales op_scales(const unit::Scales& s) {
  autograd::OpScales o;
  o.forward = f(s.fwd);
  if (!s.bwd.empty()) o.backward = f(s.bwd[0]);
  if (s.bwd.size() > 1) o.weight = f(s.bwd[1]);
  return o;
}

// ---- residuals -----------------------------------------------------------------------
ResidualSplit residual_split(autograd::Tape& t, const autograd::Var& x, double tau, double branch_mismatch) {
  const unit::ResidualScales r = unit::residual(tau, branch_mismatch);
  const bool record = t.wants_grad({&x});
  ResidualSplit out{autograd::Tape::result(x.value, record), autograd::Tape::result(x.value, record)};
  if (record)
    t.record([b = f(r.branch_grad), s = f(r.skip), xn = x.node, bn = out.branch.node, sn = out.skip.node]() {
      const bool hb = bn->has_grad(), hs = sn->has_grad();
      if (!hb && !hs) return;
      if (!hb || !hs) return xn->accumulate_scaled(hb ? bn->grad : sn->grad, hb ? b : s);
      bool has = false;
      Tensor& dx = xn->writable(&has);
      kernels::axpby(dx.f32(), bn->grad.f32(), b, sn->grad.f32(), s, dx.numel(), has);
    });
  return out;
}

autograd::Var residual_add(autograd::Tape& t, const autograd::Var& branch, const autograd::Var& skip, double tau) {
  if (branch.shape() != skip.shape())
    throw std::invalid_argument("residual_add: shapes differ: " + shape_str(branch.shape()) + " and " +
                                shape_str(skip.shape()));
  const unit::ResidualScales r = unit::residual(tau);
  const float b = f(r.branch), s = f(r.skip);
  Tensor y = Tensor::empty(branch.shape());
  kernels::axpby(y.f32(), branch.value.f32(), b, skip.value.f32(), s, y.numel(), false);
  const bool record = t.wants_grad({&branch, &skip});
  autograd::Var out = autograd::Tape::result(std::move(y), record);
  if (record)
    t.record([bn = branch.node, sn = skip.node, on = out.node]() {
      if (!on->has_grad()) return;
      if (bn) bn->accumulate(on->grad);
      if (sn) sn->accumulate(on->grad);
    });
  return out;
}

// ---- activations -----------------------------------------------------------------------
namespace {
// y = alpha act(x); dx += beta act'(x) dy, for activations computed here.
template <class Act, class Grad>
autograd::Var pointwise(autograd::Tape& t, const autograd::Var& x, float alpha, float beta, Act act, Grad grad) {
  const int64_t n = x.numel();
  Tensor y = Tensor::empty(x.shape());
  float* o = y.f32();
  const float* in = x.value.f32();
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) o[i] = alpha * act(in[i]);
  const bool record = t.wants_grad({&x});
  autograd::Var out = autograd::Tape::result(std::move(y), record);
  if (record)
    t.record([n, beta, grad, saved = t.save(x.value), xn = x.node, on = out.node]() {
      if (!on->has_grad()) return;
      const Tensor xs = autograd::Tape::restore(saved);
      const float* xv = xs.f32();
      const float* dy = on->grad.f32();
      float* dx = xn->buffer().f32();
#pragma omp parallel for schedule(static) if (n > 16384)
      for (int64_t i = 0; i < n; ++i) dx[i] += beta * grad(xv[i]) * dy[i];
    });
  return out;
}

// y = alpha kernel_fwd(x); dx += kernel_bwd(x, beta dy): the multiplier rides on
// the kernel's own output and on the incoming gradient.
using KernelFwd = void (*)(float*, const float*, int64_t);
using KernelBwd = void (*)(float*, const float*, const float*, int64_t);
autograd::Var kernel_pointwise(autograd::Tape& t, const autograd::Var& x, float alpha, float beta, KernelFwd fwd, KernelBwd bwd) {
  const int64_t n = x.numel();
  Tensor y = Tensor::empty(x.shape());
  fwd(y.f32(), x.value.f32(), n);
  if (alpha != 1.0f) kernels::scale(y.f32(), y.f32(), alpha, n);
  const bool record = t.wants_grad({&x});
  autograd::Var out = autograd::Tape::result(std::move(y), record);
  if (record)
    t.record([n, beta, bwd, saved = t.save(x.value), xn = x.node, on = out.node]() {
      if (!on->has_grad()) return;
      Tensor dy = on->grad;
      if (beta != 1.0f) {
        dy = Tensor::empty(on->shape, DType::f32, MemoryKind::workspace);
        kernels::scale(dy.f32(), on->grad.f32(), beta, n);
      }
      bwd(xn->buffer().f32(), autograd::Tape::restore(saved).f32(), dy.f32(), n);
    });
  return out;
}
}  // namespace

autograd::Var unit_gelu(autograd::Tape& t, autograd::Var x, const unit::Scales& s, GeluForm form, double mult) {
  need_bwd(s, 1, "unit_gelu");
  if (form == GeluForm::tanh) {
    if (mult != 1.0) throw std::invalid_argument("unit_gelu: the tanh form supports mult 1 only, got " + std::to_string(mult));
    return scaled_gelu(t, std::move(x), f(s.fwd), f(s.bwd[0]));
  }
  // gelu(m x)/m = x Phi(m x); derivative Phi(m x) + m x phi(m x).
  const double m = mult;
  auto act = [m](float v) {
    const double z = m * v;
    return static_cast<float>(v * 0.5 * std::erfc(-z / std::numbers::sqrt2));
  };
  auto grad = [m](float v) {
    const double z = m * v;
    return static_cast<float>(0.5 * std::erfc(-z / std::numbers::sqrt2) +
                              z * std::exp(-0.5 * z * z) / std::sqrt(2 * std::numbers::pi));
  };
  return pointwise(t, x, f(s.fwd), f(s.bwd[0]), act, grad);
}

autograd::Var unit_relu(autograd::Tape& t, const autograd::Var& x, const unit::Scales& s) {
  need_bwd(s, 1, "unit_relu");
  return kernel_pointwise(t, x, f(s.fwd), f(s.bwd[0]), kernels::relu_forward, kernels::relu_backward);
}

autograd::Var unit_silu(autograd::Tape& t, const autograd::Var& x, const unit::Scales& s, double mult) {
  need_bwd(s, 1, "unit_silu");
  const double m = mult;
  auto act = [m](float v) { return static_cast<float>(v / (1.0 + std::exp(-m * v))); };
  auto grad = [m](float v) {
    const double sg = 1.0 / (1.0 + std::exp(-m * v));
    return static_cast<float>(sg + m * v * sg * (1.0 - sg));
  };
  return pointwise(t, x, f(s.fwd), f(s.bwd[0]), act, grad);
}

// ---- norms -------------------------------------------------------------------------------
autograd::Var unit_layer_norm(autograd::Tape& t, const autograd::Var& x, const autograd::Var& weight, const autograd::Var& bias, const unit::Scales& s) {
  need_bwd(s, 3, "unit_layer_norm");
  return scaled_layer_norm(t, x, weight, bias, f(s.fwd), f(s.bwd[0]), f(s.bwd[1]), f(s.bwd[2]));
}

// y = x r w with r = 1/sqrt(mean x^2 + eps); dx = r (w dy - xhat mean(xhat w dy)), dw = sum xhat dy.
autograd::Var unit_rms_norm(autograd::Tape& t, const autograd::Var& x, const autograd::Var& weight, const unit::Scales& s, float eps) {
  need_bwd(s, 2, "unit_rms_norm");
  const int64_t C = x.dim(-1), N = x.numel() / C;
  if (weight.shape() != Shape{C})
    throw std::invalid_argument("unit_rms_norm: weight " + shape_str(weight.shape()) + " does not match input " +
                                shape_str(x.shape()));
  Tensor y = Tensor::empty(x.shape()), rinv = Tensor::empty({N});
  kernels::rmsnorm_forward(y.f32(), rinv.f32(), x.value.f32(), weight.value.f32(), f(s.fwd), N, C, eps);
  const bool record = t.wants_grad({&x, &weight});
  autograd::Var out = autograd::Tape::result(std::move(y), record);
  if (record)
    t.record([N, C, bx = f(s.bwd[0]), bw = f(s.bwd[1]), xs = t.save(x.value), wt = weight.value, rinv,
              xn = x.node, wn = weight.node, on = out.node]() {
      if (!on->has_grad()) return;
      float* dx = xn ? xn->buffer().f32() : nullptr;
      float* dw = wn ? wn->buffer().f32() : nullptr;
      if (xs.dtype() == DType::bf16)  // widened row by row, no fp32 copy
        kernels::rmsnorm_backward_bf16x(dx, dw, on->grad.f32(), xs.data<uint16_t>(), wt.f32(), rinv.f32(), bx, bw, N, C);
      else
        kernels::rmsnorm_backward(dx, dw, on->grad.f32(), autograd::Tape::restore(xs).f32(), wt.f32(), rinv.f32(), bx, bw, N, C);
    });
  return out;
}

// ---- attention -------------------------------------------------------------------------
// The kernel divides scores by sqrt(d_head); scaling q by mult/sqrt(d_head)
// first gives the u-muP logits mult q.k/d_head.
autograd::Var unit_causal_self_attention(autograd::Tape& t, const autograd::Var& qkv, int64_t heads, double mult, const unit::Scales& s) {
  // The standard op from here: the same kernels (bf16 probabilities, blockwise for long sequences).
  return causal_self_attention(t, unit_attention_qkv(t, qkv, heads, mult, s), heads);
}

autograd::Var unit_attention_qkv(autograd::Tape& t, const autograd::Var& qkv, int64_t heads, double mult, const unit::Scales& s) {
  need_bwd(s, 3, "unit_causal_self_attention");
  if (qkv.value.ndim() != 3 || qkv.dim(2) % 3 != 0)
    throw std::invalid_argument("unit_causal_self_attention: qkv must be [B, T, 3C], got " + shape_str(qkv.shape()));
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  if (heads <= 0 || C % heads != 0)
    throw std::invalid_argument("unit_causal_self_attention: " + std::to_string(C) + " channels do not split into " +
                                std::to_string(heads) + " heads");
  const int64_t D = C / heads, rows = B * T;
  if (!(s.fwd > 0))
    throw std::invalid_argument("unit_causal_self_attention: forward scale must be positive, got " + std::to_string(s.fwd));
  const double qf = unit::attention_logit_scale(D, mult) * std::sqrt(static_cast<double>(D));
  // One pass copies qkv as [qf q | k | fwd v]: the output is linear in v, so
  // it comes out x fwd. The logits' gradient then carries fwd too, taken off
  // q's and k's backward multipliers: dq x bq qf / fwd, dk x bk / fwd, dv x bv.
  const float fwd_scales[3] = {f(qf), 1.0f, f(s.fwd)};
  Tensor q2 = Tensor::empty(qkv.shape());
  kernels::scale_segments(q2.f32(), qkv.value.f32(), fwd_scales, 3, rows, C, false);
  const bool record = t.wants_grad({&qkv});
  autograd::Var scaled_qkv = autograd::Tape::result(std::move(q2), record);
  if (record)
    t.record([rows, C, bq = f(s.bwd[0] * qf / s.fwd), bk = f(s.bwd[1] / s.fwd), bv = f(s.bwd[2]), qn = qkv.node,
              on = scaled_qkv.node]() {
      if (!on->has_grad()) return;
      const float bwd_scales[3] = {bq, bk, bv};
      if (!qn->has_grad() && on->grad.storage_unique()) {  // scaled in place and adopted: no [B, T, 3C] buffer more
        kernels::scale_segments(on->grad.f32(), on->grad.f32(), bwd_scales, 3, rows, C, false);
        qn->accumulate(on->grad);
        on->grad = Tensor();
        return;
      }
      bool has = false;
      Tensor& dx = qn->writable(&has);
      kernels::scale_segments(dx.f32(), on->grad.f32(), bwd_scales, 3, rows, C, has);
    });
  return scaled_qkv;
}

// ---- embeddings ------------------------------------------------------------------------
autograd::Var unit_token_position_embedding(autograd::Tape& t, const Tensor& ids, const autograd::Var& wte, const autograd::Var& wpe, float fwd, float bwd_wte,
                                  float bwd_wpe) {
  if (ids.ndim() != 2 || ids.dtype() != DType::i32)
    throw std::invalid_argument("unit_token_position_embedding: ids must be i32 [B, T], got " + shape_str(ids.shape()));
  if (wte.value.ndim() != 2 || wpe.value.ndim() != 2 || wpe.dim(1) != wte.dim(1))
    throw std::invalid_argument("unit_token_position_embedding: wte " + shape_str(wte.shape()) + " and wpe " +
                                shape_str(wpe.shape()) + " must be [V, C] and [T, C]");
  const int64_t B = ids.dim(0), T = ids.dim(1), C = wte.dim(1), V = wte.dim(0);
  if (T > wpe.dim(0))
    throw std::invalid_argument("unit_token_position_embedding: sequence length " + std::to_string(T) +
                                " exceeds the context of " + std::to_string(wpe.dim(0)) + " positions");
  const int32_t* id = ids.data<int32_t>();
  for (int64_t i = 0; i < B * T; ++i)
    if (id[i] < 0 || id[i] >= V)
      throw std::out_of_range("unit_token_position_embedding: id " + std::to_string(id[i]) + " at position " +
                              std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
  Tensor y = Tensor::empty({B, T, C});
  kernels::embedding_forward(y.f32(), id, wte.value.f32(), wpe.value.f32(), B, T, C, fwd);
  const bool record = t.wants_grad({&wte, &wpe});
  autograd::Var out = autograd::Tape::result(std::move(y), record);
  if (record)
    t.record([B, T, C, bwd_wte, bwd_wpe, ids, en = wte.node, pn = wpe.node, on = out.node]() {
      if (!on->has_grad()) return;
      kernels::embedding_backward(en ? en->buffer().f32() : nullptr, pn ? pn->buffer().f32() : nullptr,
                                  on->grad.f32(), ids.data<int32_t>(), B, T, C, bwd_wte, bwd_wpe);
    });
  return out;
}

// ---- losses ------------------------------------------------------------------------------
autograd::Var unit_cross_entropy(autograd::Tape& t, const autograd::Var& logits, const Tensor& targets, const unit::LossScales& s,
                       autograd::LossStats* stats) {
  if (s.bwd.empty()) throw std::invalid_argument("unit_cross_entropy: missing the logits' backward scale");
  return scaled_cross_entropy(t, logits, targets, f(s.input_fwd), f(s.bwd[0]), stats);
}

autograd::Var unit_mse(autograd::Tape& t, const autograd::Var& pred, const autograd::Var& target, const unit::LossScales& s) {
  if (s.bwd.size() < 2) throw std::invalid_argument("unit_mse: expected backward scales {input, target}");
  return autograd::mse(t, pred, target, f(s.bwd[0]), f(s.bwd[1]));
}

// ---- analysis ------------------------------------------------------------------------------
autograd::Var observe(autograd::Tape& t, const autograd::Var& x, const std::string& name) {
  const auto& obs = t.ctx().observer;
  if (!obs) return x;
  obs(name, false, x.value);
  const bool record = t.wants_grad({&x});
  if (!record) return x;
  autograd::Var out = autograd::Tape::result(x.value, true);
  t.record([obs, name, xn = x.node, on = out.node]() {
    if (!on->has_grad()) return;
    obs(name, true, on->grad);
    xn->accumulate(on->grad);
  });
  return out;
}

}  // namespace mantissa::unit
