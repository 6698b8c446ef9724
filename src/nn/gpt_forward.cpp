// The GPT's forward pass, standard and unit-scaled from one code: the unit
// scales (unit/rules.hpp) replace the standard ops where the parametrisation
// is unit. Rows are the N = B*T positions; x [B, T, C], qkv [B, T, 3C],
// fc [B, T, 4C].
//   x = wte[ids] + wpe                                   (unit: 2^-1/2 (...), a unit add)
//   per block, pre-norm:  x = x + proj(attn(ln_1 x));    x = x + mlp(ln_2 x)
//              post-norm: x = ln_1(x + proj(attn(x)));   x = ln_2(x + mlp(x))
//   logits = head(ln_f x) (post-norm: no ln_f, the last block ends with a norm)
// Unit: every "+" is residual_split / residual_add with the block's tau
// (tau_attn, tau_mlp; u-muP: the depth rule), the attention is u-muP's, the
// GELU scaled, the linears scaled by unit::linear (the scales ride in the
// GEMM alpha), dropout x sqrt(1-p) both ways, and the head is the untied
// lm_head with linear_readout scales. Post-norm puts the norm after the
// weighted add, as the unit-scaling paper's post-norm models and BERT do.
//
// Every op output passes through observe() (a no-op unless a scale analysis
// set an observer), named "h<layer>.<op>"; the memory trace (bench_train
// --memory-trace) labels the op's allocations with the same name.
#include <cmath>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/nn/gpt.hpp"
#include "nn/causal_lm.hpp"
#include "mantissa/tensor/memory_trace.hpp"
#include "mantissa/unit/ops.hpp"

namespace mantissa::nn {
namespace ag = mantissa::autograd;

namespace {
// Moves a Var out so that its value dies with the op call it is passed to:
// forward values are dropped as soon as their last consumer ran (what the
// backward pass needs, the ops saved themselves).
ag::Var take(ag::Var& v) { return std::move(v); }
}  // namespace

ag::Var GPT::dropout(ag::Tape& t, ag::Var x) {
  const float p = config_.dropout;
  if (!config_.unit.enabled) return ag::dropout(t, x, p);
  if (p == 0.0f || !t.ctx().training) return x;
  const unit::Scales s = unit::dropout(p);  // sqrt(1-p) on both passes
  return ag::scale_split(t, ag::dropout(t, x, p), static_cast<float>(s.fwd), static_cast<float>(s.bwd[0]));
}

ag::Var GPT::norm(ag::Tape& t, const ag::Var& x, autograd::Parameter* w, autograd::Parameter* b) {
  if (!config_.unit.enabled) return ag::layer_norm(t, x, t.param(*w), t.param(*b));
  const unit::Scales ln = unit::layer_norm(config_.d_model, x.numel());
  if (w == nullptr) return unit::unit_layer_norm(t, x, t.constant(norm_gain_), t.constant(norm_shift_), ln);
  return unit::unit_layer_norm(t, x, t.param(*w), t.param(*b), ln);
}

std::pair<double, double> GPT::residual_taus(size_t layer) const {
  const unit::UnitConfig& u = config_.unit;
  if (!u.umup) return {u.tau_attn, u.tau_mlp};
  // u-muP: residual 2l (attention) and 2l+1 (MLP) of 2L, scaled with depth.
  const int i = 2 * static_cast<int>(layer), n = 2 * static_cast<int>(config_.layers);
  return {unit::transformer_residual_tau(i, n, u.residual_mult, u.residual_attn_ratio),
          unit::transformer_residual_tau(i + 1, n, u.residual_mult, u.residual_attn_ratio)};
}

// One block on the residual stream x [B, T, C].
ag::Var GPT::block(ag::Tape& t, const Block& b, ag::Var x_in, size_t layer) {
  const unit::UnitConfig& uc = config_.unit;
  const bool u = uc.enabled, pre = config_.pre_norm;
  const int64_t C = config_.d_model, N = x_in.numel() / C, H = config_.heads;
  std::string n("h");  // (not "h" + ...: GCC 12 -Wrestrict false positive)
  n += std::to_string(layer);
  n += '.';
  auto op = [&](const char* name, auto&& f) {
    const std::string full = n + name;
    MemoryLabel label(full);
    return unit::observe(t, f(), full);
  };
  // y [N, out] = x [N, in] @ w [in, out] + bias; unit: unit::linear's scales.
  auto linear = [&](ag::Var x, autograd::Parameter* w, autograd::Parameter* bias, int64_t in, int64_t out) {
    ag::Var bv = t.param(*bias);
    const ag::OpScales s = u ? unit::op_scales(unit::linear(in, out, N, uc.rules("linear"))) : ag::OpScales{};
    return ag::linear(t, take(x), t.param(*w), &bv, s);
  };
  auto split = [&](ag::Var& x, double tau) {
    return u ? unit::residual_split(t, take(x), tau) : unit::ResidualSplit{x, take(x)};
  };
  // skip + branch y; post-norm: then the norm (w, bias), observed as `ln`.
  auto join = [&](unit::ResidualSplit& r, ag::Var& y, double tau, const char* name, autograd::Parameter* w, autograd::Parameter* bias,
                  const char* ln) {
    ag::Var x = op(name, [&] { return u ? unit::residual_add(t, take(y), take(r.skip), tau) : ag::add(t, take(r.skip), take(y)); });
    return pre ? x : op(ln, [&] { return norm(t, take(x), w, bias); });
  };
  const auto [tau_attn, tau_mlp] = residual_taus(layer);

  // Attention.
  unit::ResidualSplit r = split(x_in, tau_attn);
  ag::Var h = pre ? op("attn.ln", [&] { return norm(t, take(r.branch), b.ln1_w, b.ln1_b); }) : take(r.branch);
  ag::Var qkv = op("attn.qkv", [&] { return linear(take(h), b.attn_w, b.attn_b, C, 3 * C); });  // [B, T, 3C]
  ag::Var a = op("attn.sdpa", [&] {  // [B, T, C]
    if (!u) return ag::causal_self_attention(t, take(qkv), H);
    const unit::Scales sdpa = unit::scaled_dot_product_attention(qkv.dim(1), C / H, true, uc.attn_mult);
    return unit::unit_causal_self_attention(t, take(qkv), H, uc.attn_mult, sdpa);
  });
  ag::Var y = op("attn.proj", [&] { return dropout(t, linear(take(a), b.proj_w, b.proj_b, C, C)); });
  ag::Var x = join(r, y, tau_attn, "attn.residual", b.ln1_w, b.ln1_b, "attn.ln");

  // GELU MLP.
  r = split(x, tau_mlp);
  h = pre ? op("mlp.ln", [&] { return norm(t, take(r.branch), b.ln2_w, b.ln2_b); }) : take(r.branch);
  ag::Var f = op("mlp.fc", [&] { return linear(take(h), b.fc_w, b.fc_b, C, 4 * C); });  // [B, T, 4C]
  f = op("mlp.gelu", [&] { return u ? unit::unit_gelu(t, take(f), unit::gelu(1.0, uc.rules("gelu"))) : ag::gelu(t, take(f)); });
  y = op("mlp.proj", [&] { return dropout(t, linear(take(f), b.mlp_proj_w, b.mlp_proj_b, 4 * C, C)); });
  return join(r, y, tau_mlp, "mlp.residual", b.ln2_w, b.ln2_b, "mlp.ln");
}

// ids [B, T] -> logits [B, T, V].
ag::Var GPT::forward(ag::Tape& t, const Tensor& ids) {
  const int64_t B = ids.dim(0), T = ids.dim(1);
  return ag::reshape(t, head(t, hidden(t, ids), B * T), {B, T, config_.vocab});
}

lm::Forward GPT::parts(const Tensor& ids) {
  const int64_t N = ids.numel();
  return {[this, &ids](ag::Tape& t) { return hidden(t, ids); },
          [this, N](ag::Tape& t, const ag::Var& x) { return head(t, x, N); }, config_.vocab};
}

// ids [B, T] -> the final hidden state x [N, C] (after ln_f; post-norm: the last block's norm).
ag::Var GPT::hidden(ag::Tape& t, const Tensor& ids) {
  const unit::UnitConfig& uc = config_.unit;
  const bool u = uc.enabled;
  const int64_t B = ids.dim(0), T = ids.dim(1), C = config_.d_model, V = config_.vocab, N = B * T;
  ag::Var wte = t.param(*wte_);
  ag::Var x;
  {
    MemoryLabel label("embedding");
    if (u) {  // wte[ids] + wpe: a unit add of two unit embeddings
      const unit::Scales add = unit::add(N * C, N * C, N * C, uc.rules("add"));
      const double bwd_wte = add.bwd[0] * unit::embedding(V, N).bwd[0];
      const double bwd_wpe = add.bwd[1] * unit::embedding(T, N).bwd[0];
      x = unit::unit_token_position_embedding(t, ids, wte, t.param(*wpe_), static_cast<float>(add.fwd),
                                            static_cast<float>(bwd_wte), static_cast<float>(bwd_wpe));
    } else {
      x = ag::token_position_embedding(t, ids, wte, t.param(*wpe_));
    }
    x = unit::observe(t, dropout(t, take(x)), "embedding");
  }
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    if (checkpoint_every_ > 0 && l % static_cast<size_t>(checkpoint_every_) == 0)
      x = ag::checkpoint(t, x, [this, &b, l](ag::Tape& inner, const ag::Var& xin) { return block(inner, b, xin, l); });
    else
      x = block(t, b, std::move(x), l);
  }
  if (config_.pre_norm) {
    MemoryLabel label("ln_f");
    x = unit::observe(t, norm(t, take(x), lnf_w_, lnf_b_), "ln_f");
  }
  return ag::reshape(t, take(x), {N, C});
}

// Logits [rows, V] = x [rows, C] @ head [V, C]^T: the tied wte, or the unit
// model's lm_head; N, the batch's rows, sets the unit readout's scales.
ag::Var GPT::head(ag::Tape& t, const ag::Var& x, int64_t N) {
  const unit::UnitConfig& uc = config_.unit;
  const bool u = uc.enabled;
  const int64_t C = config_.d_model, V = config_.vocab;
  MemoryLabel label("logits");
  const ag::OpScales scales = u ? unit::op_scales(unit::linear_readout(C, V, N, uc.rules("readout"))) : ag::OpScales{};
  const ag::ReadoutScope readout(t);
  ag::Var w = t.param(u ? *lm_head_ : *wte_);
  return unit::observe(t, ag::matmul(t, x, w, false, true, scales), "logits");
}

}  // namespace mantissa::nn
