// Unit-scaled ops (Blake et al. 2023; u-muP 2024): the pieces a unit-scaled
// model needs beyond the OpScales multipliers that linear/matmul/bmm already
// fuse into the GEMM alpha. Each op takes the numbers from unit/rules.hpp
// (unit::Scales / LossScales / residual taus) and applies them inside the
// pass that computes the op, so that with unit-variance inputs the output and
// every input gradient have unit variance. Convention as in unit/rules.hpp:
// output *= fwd in the forward pass; the gradient the unscaled op produces
// for input i is multiplied by bwd[i] in the backward pass.
#pragma once

#include <cstdint>
#include <string>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/unit/rules.hpp"

namespace mantissa::unit {

// OpScales of a matrix product from a scaling rule: {fwd, bwd[0], bwd[1]}
// (linear: forward, input gradient, weight gradient).
autograd::OpScales op_scales(const unit::Scales& s);

// ---- residuals -----------------------------------------------------------------------
// x -> (branch, skip): both share x's value (no copy). Backward:
// dx += (tau/d) dbranch + (1/d) dskip in one pass, d = sqrt(1 + tau^2);
// the branch term divided by branch_mismatch (unit::residual).
struct ResidualSplit {
  autograd::Var branch;
  autograd::Var skip;
};
ResidualSplit residual_split(autograd::Tape& t, const autograd::Var& x, double tau, double branch_mismatch = 1.0);
// y = (tau/d) branch + (1/d) skip in one pass; the gradient passes to both
// unchanged (the scales live in residual_split's backward).
autograd::Var residual_add(autograd::Tape& t, const autograd::Var& branch, const autograd::Var& skip, double tau);

// ---- elementwise activations -----------------------------------------------------------
// y = fwd * act(x); dx += bwd[0] * act'(x) dy. The tanh GELU and ReLU run
// the vectorised kernels with the multiplier applied to their own output /
// incoming gradient; the erf GELU and SiLU (with `mult`, the library's
// definitions gelu(mult x)/mult and x sigmoid(mult x)) are computed here.
using GeluForm = kernels::GeluForm;
// x by value: a caller that moves it in lets the tanh form write over its buffer.
autograd::Var unit_gelu(autograd::Tape& t, autograd::Var x, const unit::Scales& s, GeluForm form = GeluForm::tanh, double mult = 1.0);
autograd::Var unit_relu(autograd::Tape& t, const autograd::Var& x, const unit::Scales& s);
autograd::Var unit_silu(autograd::Tape& t, const autograd::Var& x, const unit::Scales& s, double mult = 1.0);

// ---- rows --------------------------------------------------------------------------------
// Layer norm of x [N, C] (eps 1e-5); s = unit::layer_norm(C, numel):
// out *= s.fwd; dx *= s.bwd[0], dweight *= s.bwd[1], dbias *= s.bwd[2].
autograd::Var unit_layer_norm(autograd::Tape& t, const autograd::Var& x, const autograd::Var& weight, const autograd::Var& bias, const unit::Scales& s);
// RMS norm y = x / sqrt(mean x^2 + eps) * weight over the last dim (eps 1e-5);
// s = unit::rms_norm(C, numel): bwd {x, weight}.
autograd::Var unit_rms_norm(autograd::Tape& t, const autograd::Var& x, const autograd::Var& weight, const unit::Scales& s, float eps = 1e-5f);
// Causal multi-head attention on qkv [B, T, 3C] -> [B, T, C] with the u-muP
// logit scale mult/d_head (not 1/sqrt(d_head)) and s =
// unit::scaled_dot_product_attention(T, d_head, true, mult): out *= s.fwd,
// dQ, dK, dV *= s.bwd[0..2].
autograd::Var unit_causal_self_attention(autograd::Tape& t, const autograd::Var& qkv, int64_t heads, double mult, const unit::Scales& s);
// Its input half, for any attention op with scores / sqrt(d_head): qkv copied
// as [qf q | k | s.fwd v], qf = mult/d_head x sqrt(d_head), with the backward
// multipliers that make the attention's dQ, dK, dV come out x s.bwd[0..2].
autograd::Var unit_attention_qkv(autograd::Tape& t, const autograd::Var& qkv, int64_t heads, double mult, const unit::Scales& s);

// ---- embeddings ------------------------------------------------------------------------
// out [B, T, C] = fwd * (wte[ids] + wpe[0..T)); dwte += bwd_wte * scatter(dout),
// dwpe += bwd_wpe * sum over the batch of dout. With unit weights the sum has
// variance 2, so fwd = 2^-1/2 (unit::add), bwd_wte = that x
// sqrt(V / tokens) and bwd_wpe = that x sqrt(T / tokens) (unit::embedding).
autograd::Var unit_token_position_embedding(autograd::Tape& t, const Tensor& ids, const autograd::Var& wte, const autograd::Var& wpe, float fwd,
                                  float bwd_wte, float bwd_wpe);

// ---- losses (scalar [1] results, sum reduction) ------------------------------------------
// Cross-entropy of s.input_fwd x logits [N, V] against targets i32 [N] (< 0
// ignored), summed; dlogits = dL x s.bwd[0] x (softmax - onehot). The
// forward-only mean scale s.mean_scale is not applied (callers divide the
// summed loss); stats get the sum of per-target losses and the count.
autograd::Var unit_cross_entropy(autograd::Tape& t, const autograd::Var& logits, const Tensor& targets, const unit::LossScales& s,
                       autograd::LossStats* stats = nullptr);
// Sum of (pred - target)^2; dpred = dL s.bwd[0] 2 (pred - target), dtarget = -dL s.bwd[1] 2 (pred - target).
autograd::Var unit_mse(autograd::Tape& t, const autograd::Var& pred, const autograd::Var& target, const unit::LossScales& s);

// ---- analysis ----------------------------------------------------------------------------
// Identity. When t.ctx().observer is set, reports x's value under `name`
// (forward) and, in the backward pass, the gradient arriving here; without an
// observer it returns x itself and records nothing.
autograd::Var observe(autograd::Tape& t, const autograd::Var& x, const std::string& name);

}  // namespace mantissa::unit
