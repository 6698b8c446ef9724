// The unit-scaled GPT: the same parameters and block structure as
// the standard GPT (gpt.cpp), with weights N(0,1) and every op scaled by the
// rules of unit/rules.hpp so activations and gradients start at unit scale.
//
//   x  = 2^-1/2 (wte[ids] + wpe)                                  unit add
//   per block, for attention (tau_attn) then MLP (tau_mlp; u-muP: the depth rule):
//     branch, skip = residual_split(x, tau)
//     attention: ln (u-muP: no gain or shift) -> linear c_attn -> u-muP causal attention -> linear c_proj
//     MLP:       ln -> linear c_fc -> scaled GELU -> linear c_proj
//     x = residual_add(branch, skip, tau)
//   logits = readout(ln_f(x)) with the untied lm_head; unit cross-entropy.
// Linear scales ride in the GEMM alpha (OpScales), the rest in the pass that
// computes each op. Shapes: x [B, T, C], qkv [B, T, 3C], fc [B, T, 4C].
#include <cmath>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/unit/ops.hpp"
#include "mantissa/nn/gpt.hpp"

namespace mantissa::nn {
namespace ag = mantissa::autograd;
namespace us = mantissa::scaling;

namespace {
// Dropout with its unit scale sqrt(1-p) on both passes (identity when off).
ag::Var unit_dropout(ag::Tape& t, const ag::Var& x, float p) {
  if (p == 0.0f || !t.ctx().training) return x;
  const us::Scales s = us::dropout(p);
  return ag::scale_split(t, ag::dropout(t, x, p), static_cast<float>(s.fwd), static_cast<float>(s.bwd[0]));
}
}  // namespace

ag::Var GPT::unit_norm(ag::Tape& t, const ag::Var& x, Parameter* w, Parameter* b) {
  const int64_t C = config_.d_model;
  const us::Scales ln = us::layer_norm(C, x.numel());
  if (w == nullptr) return ag::unit_layer_norm(t, x, t.constant(norm_gain_), t.constant(norm_shift_), ln);
  return ag::unit_layer_norm(t, x, t.param(*w), t.param(*b), ln);
}

std::pair<double, double> GPT::residual_taus(size_t layer) const {
  const UnitConfig& u = config_.unit;
  if (!u.umup) return {u.tau_attn, u.tau_mlp};
  // u-muP: residual 2l (attention) and 2l+1 (MLP) of 2L, scaled with depth.
  const int i = 2 * static_cast<int>(layer), n = 2 * static_cast<int>(config_.layers);
  return {us::transformer_residual_tau(i, n, u.residual_mult, u.residual_attn_ratio),
          us::transformer_residual_tau(i + 1, n, u.residual_mult, u.residual_attn_ratio)};
}

ag::Var GPT::unit_block(ag::Tape& t, const Block& b, const ag::Var& x_in, size_t layer) {
  const UnitConfig& u = config_.unit;
  const int64_t C = config_.d_model, N = x_in.numel() / C, H = config_.heads;
  const float p = config_.dropout;
  std::string n("h");  // (not "h" + ...: GCC 12 -Wrestrict false positive)
  n += std::to_string(layer);
  n += '.';
  const auto [tau_attn, tau_mlp] = residual_taus(layer);
  // Attention branch.
  ag::ResidualSplit r = ag::residual_split(t, x_in, tau_attn);
  ag::Var h = ag::observe(t, unit_norm(t, r.branch, b.ln1_w, b.ln1_b), n + "attn.ln");
  ag::Var attn_b = t.param(*b.attn_b);
  const ag::OpScales qkv_s = ag::op_scales(us::linear(C, 3 * C, N, u.rules("linear")));
  ag::Var qkv = ag::observe(t, ag::linear(t, h, t.param(*b.attn_w), &attn_b, qkv_s), n + "attn.qkv");
  const us::Scales sdpa = us::scaled_dot_product_attention(qkv.dim(1), C / H, true, u.attn_mult);
  ag::Var a = ag::observe(t, ag::unit_causal_self_attention(t, qkv, H, u.attn_mult, sdpa), n + "attn.sdpa");
  ag::Var proj_b = t.param(*b.proj_b);
  const ag::OpScales proj_s = ag::op_scales(us::linear(C, C, N, u.rules("linear")));
  ag::Var y = ag::observe(t, unit_dropout(t, ag::linear(t, a, t.param(*b.proj_w), &proj_b, proj_s), p), n + "attn.proj");
  ag::Var x = ag::observe(t, ag::residual_add(t, y, r.skip, tau_attn), n + "attn.residual");

  // MLP branch.
  r = ag::residual_split(t, x, tau_mlp);
  h = ag::observe(t, unit_norm(t, r.branch, b.ln2_w, b.ln2_b), n + "mlp.ln");
  ag::Var fc_b = t.param(*b.fc_b);
  const ag::OpScales fc_s = ag::op_scales(us::linear(C, 4 * C, N, u.rules("linear")));
  ag::Var fc = ag::observe(t, ag::linear(t, h, t.param(*b.fc_w), &fc_b, fc_s), n + "mlp.fc");
  ag::Var f = ag::observe(t, ag::unit_gelu(t, std::move(fc), us::gelu(1.0, u.rules("gelu"))), n + "mlp.gelu");
  ag::Var mlp_b = t.param(*b.mlp_proj_b);
  const ag::OpScales mp_s = ag::op_scales(us::linear(4 * C, C, N, u.rules("linear")));
  y = ag::observe(t, unit_dropout(t, ag::linear(t, f, t.param(*b.mlp_proj_w), &mlp_b, mp_s), p), n + "mlp.proj");
  return ag::observe(t, ag::residual_add(t, y, r.skip, tau_mlp), n + "mlp.residual");
}

// ids [B, T] -> logits [B, T, V].
ag::Var GPT::unit_forward(ag::Tape& t, const Tensor& ids) {
  const UnitConfig& u = config_.unit;
  const int64_t B = ids.dim(0), T = ids.dim(1), C = config_.d_model, V = config_.vocab, N = B * T;
  // wte[ids] + wpe: a unit add of two unit embeddings.
  const us::Scales add = us::add(N * C, N * C, N * C, u.rules("add"));
  const double bwd_wte = add.bwd[0] * us::embedding(V, N).bwd[0];
  const double bwd_wpe = add.bwd[1] * us::embedding(T, N).bwd[0];
  ag::Var x = ag::unit_token_position_embedding(t, ids, t.param(*wte_), t.param(*wpe_), static_cast<float>(add.fwd),
                                                static_cast<float>(bwd_wte), static_cast<float>(bwd_wpe));
  x = ag::observe(t, unit_dropout(t, x, config_.dropout), "embedding");
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    if (checkpoint_every_ > 0 && l % static_cast<size_t>(checkpoint_every_) == 0)
      x = ag::checkpoint(t, x, [this, &b, l](ag::Tape& inner, const ag::Var& xin) { return unit_block(inner, b, xin, l); });
    else
      x = unit_block(t, b, x, l);
  }
  x = ag::observe(t, unit_norm(t, x, lnf_w_, lnf_b_), "ln_f");
  // Readout: logits [N, V] = x [N, C] @ lm_head [V, C]^T.
  const ag::OpScales head = ag::op_scales(us::linear_readout(C, V, N, u.rules("readout")));
  const ag::ReadoutScope readout(t);
  ag::Var logits = ag::observe(t, ag::matmul(t, ag::reshape(t, x, {N, C}), t.param(*lm_head_), false, true, head), "logits");
  return ag::reshape(t, logits, {B, T, V});
}

}  // namespace mantissa::nn
