// The BERT encoder with its MLM head, standard and unit-scaled from one
// forward code: the unit scales (unit/rules.hpp) are 1 in the standard
// parametrisation. Rows are the B*T positions, x [N, C]:
//   x = ln(word[ids] + type[types] + position[t])           (unit: each x 3^-1/2)
//   per block, post-norm: x = ln(x + o(attn(q, k, v)(x))),  x = ln(x + out(gelu(fc x)))
//              pre-norm:  x = x + o(attn(ln x)),             x = x + out(gelu(fc ln x));  then ln(x)
//   h = ln(gelu(dense x[rows]))                              [R, C], R predicted rows
//   logits = h @ word^T + bias                               [R, V]
#include "mantissa/nn/bert.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/autograd/ops_padded_attention.hpp"
#include "mantissa/nn/init.hpp"
#include "mantissa/unit/ops.hpp"
#include "nn/causal_lm.hpp"

namespace mantissa::nn {
namespace ag = mantissa::autograd;

// ---- construction ------------------------------------------------------------------------------
Bert::Linear Bert::linear(const std::string& name, int64_t in, int64_t out, int block, double std, Rng& rng) {
  Linear l;
  l.w = add_parameter(name + ".weight", {out, in}, autograd::Role::weight, in, block);
  init_normal(l.w->value, rng, std);
  l.b = add_parameter(name + ".bias", {out}, autograd::Role::bias, 1, block);
  l.w->bias = l.b;
  return l;
}

Bert::Norm Bert::norm(const std::string& name, int block) {
  Norm n;
  n.w = add_parameter(name + ".weight", {config_.d_model}, autograd::Role::norm_gain, 1, block);
  n.w->value.fill(1.0f);
  n.b = add_parameter(name + ".bias", {config_.d_model}, autograd::Role::norm_bias, 1, block);
  n.w->bias = n.b;
  return n;
}

std::string Bert::cannot_train() const {
  if (config_.hidden_dropout == 0 && config_.attention_dropout == 0) return "";
  char rates[96];
  std::snprintf(rates, sizeof rates, "hidden_dropout_prob %g, attention_probs_dropout_prob %g",
                static_cast<double>(config_.hidden_dropout), static_cast<double>(config_.attention_dropout));
  return std::string("BERT: dropout (") + rates + ") is not implemented in mantissa's BERT; it trains with --dropout 0";
}

void Bert::set_dropout(float p) {
  if (p != 0.0f)
    throw std::invalid_argument("BERT: dropout " + std::to_string(p) + " is not implemented (BERT trains with --dropout 0)");
  config_.hidden_dropout = config_.attention_dropout = 0;
}

Bert::Bert(const BertConfig& config) : config_(config) {
  config_.validate();
  const int64_t V = config_.vocab(), C = config_.d_model, F = config_.ffn();
  Rng rng(config_.seed);
  const double s = config_.unit.enabled ? 1.0 : 0.02;
  word_ = add_parameter("bert.embeddings.word_embeddings.weight", {V, C}, autograd::Role::token_embedding, C);
  init_normal(word_->value, rng, s);
  position_ = add_parameter("bert.embeddings.position_embeddings.weight", {config_.context, C}, autograd::Role::position_embedding, 1);
  init_normal(position_->value, rng, s);
  type_ = add_parameter("bert.embeddings.token_type_embeddings.weight", {config_.type_vocab, C}, autograd::Role::position_embedding, 1);
  // Unit: the two-row table starts at zero. Drawn N(0, 1), its row is a component every key of a
  // segment shares, which the attention's average over the keys does not shrink (the unit
  // attention scale assumes independent keys).
  if (!config_.unit.enabled) init_normal(type_->value, rng, s);
  ln_embed_ = norm("bert.embeddings.LayerNorm", -1);
  for (int64_t l = 0; l < config_.layers; ++l) {
    const std::string h = "bert.encoder.layer." + std::to_string(l) + ".";
    const int i = static_cast<int>(l);
    Block b;
    b.q = linear(h + "attention.self.query", C, C, i, s, rng);
    b.k = linear(h + "attention.self.key", C, C, i, s, rng);
    b.v = linear(h + "attention.self.value", C, C, i, s, rng);
    b.o = linear(h + "attention.output.dense", C, C, i, s, rng);
    b.ln_attn = norm(h + "attention.output.LayerNorm", i);
    b.fc = linear(h + "intermediate.dense", C, F, i, s, rng);
    b.out = linear(h + "output.dense", F, C, i, s, rng);
    b.ln_mlp = norm(h + "output.LayerNorm", i);
    // What each product reads, for scale propagation (Parameter::input): pre-norm its own
    // block's norm, post-norm the norm before it (the previous block's, or the embeddings').
    const Norm& attn_in = config_.pre_norm ? b.ln_attn : blocks_.empty() ? ln_embed_ : blocks_.back().ln_mlp;
    b.q.w->input = b.k.w->input = b.v.w->input = attn_in.w;
    b.o.w->input = b.v.w, b.o.w->through = autograd::Parameter::Through::attention, b.o.w->query = b.q.w, b.o.w->key = b.k.w;
    b.fc.w->input = config_.pre_norm ? b.ln_mlp.w : b.ln_attn.w;
    b.out.w->input = b.fc.w, b.out.w->through = autograd::Parameter::Through::pointwise;
    if (config_.unit.enabled) cancel_gelu_mean(b.out, C, F);
    blocks_.push_back(b);
  }
  if (config_.pre_norm) ln_final_ = norm("bert.encoder.LayerNorm", -1);
  head_dense_ = linear("cls.predictions.transform.dense", C, C, -1, s, rng);
  ln_head_ = norm("cls.predictions.transform.LayerNorm", -1);
  head_dense_.w->input = config_.pre_norm ? ln_final_.w : blocks_.back().ln_mlp.w;  // through the row gather
  decoder_bias_ = add_parameter("cls.predictions.bias", {V}, autograd::Role::bias, 1);
  word_->input = ln_head_.w;
}

// Unit: the GELU's outputs share a mean (unit::gelu_mean x its forward scale) that the
// output projection turns into one vector added to every token; summed over the blocks it makes
// the keys and values of every position alike, and the attention's average (scaled for
// independent values) does not shrink it. The projection's bias starts at minus that vector, so
// at initialisation the branch adds nothing every token shares; the bias stays trainable.
void Bert::cancel_gelu_mean(const Linear& out, int64_t C, int64_t F) {
  const unit::UnitConfig& uc = config_.unit;
  const double m = unit::gelu_mean() * gelu_scales().fwd * unit::linear(F, C, 1, uc.branch_linear_rules()).fwd;
  const float* w = out.w->value.f32();
  for (int64_t o = 0; o < C; ++o) {
    double row = 0;
    for (int64_t i = 0; i < F; ++i) row += w[o * F + i];
    out.b->value.f32()[o] = static_cast<float>(-m * row);
  }
}

// ---- forward ------------------------------------------------------------------------------------
struct Bert::Pass {
  int64_t B = 0, T = 0, N = 0;
  int64_t tokens = 0;  // non-padding tokens: the batch size of the unit weight-gradient rules
  Tensor key_len;
  unit::Scales sdpa;  // unit attention scales
};

// y [R, out] = x [R, in] @ w^T + b. Unit: s = unit::linear with `fused` outputs (q, k and v
// read one input: their input gradients sum as those of one product of width 3C).
ag::Var Bert::dense(ag::Tape& t, const ag::Var& x, const Linear& l, const unit::Scales& s) {
  if (!config_.unit.enabled) return ag::add_bias(t, ag::matmul(t, x, t.param(*l.w), false, true), t.param(*l.b));
  ag::Var y = ag::matmul(t, x, t.param(*l.w), false, true, unit::op_scales(s));
  return ag::add_bias(t, y, ag::scale_split(t, t.param(*l.b), 1.0f, static_cast<float>(s.bwd[1])));
}

// With the config's epsilon; unit: the scales of unit::unit_layer_norm.
ag::Var Bert::layer_norm(ag::Tape& t, const ag::Var& x, const Norm& n, int64_t batch) {
  const auto eps = static_cast<float>(config_.layer_norm_eps);
  if (!config_.unit.enabled) return ag::layer_norm(t, x, t.param(*n.w), t.param(*n.b), eps);
  const unit::Scales s = unit::layer_norm(config_.d_model, batch * config_.d_model);
  auto f = [](double v) { return static_cast<float>(v); };
  return ag::scaled_layer_norm(t, x, t.param(*n.w), t.param(*n.b), f(s.fwd), f(s.bwd[0]), f(s.bwd[1]), f(s.bwd[2]), eps);
}

// The config's form; unit: the scaled op with the unit rule, for either
// form (unit::gelu_mean, which cancel_gelu_mean removes, is the erf form's
// mean; the tanh form's is within 1e-3 of it).
ag::Var Bert::gelu(ag::Tape& t, ag::Var x) {
  if (!config_.unit.enabled) return ag::gelu(t, std::move(x), config_.gelu_form);
  const unit::Scales s = gelu_scales();
  return ag::scaled_gelu(t, std::move(x), static_cast<float>(s.fwd), static_cast<float>(s.bwd[0]), config_.gelu_form);
}

unit::Scales Bert::gelu_scales() const { return unit::gelu(1.0, config_.unit.rules("gelu")); }

// One block on the residual stream x [N, C].
ag::Var Bert::block(ag::Tape& t, const Pass& p, const Block& b, ag::Var x_in, size_t layer) {
  const unit::UnitConfig& uc = config_.unit;
  const bool u = uc.enabled, pre = config_.pre_norm;
  const int64_t C = config_.d_model, F = config_.ffn(), H = config_.heads;
  std::string n("h");  // (not "h" + ...: GCC 12 -Wrestrict false positive)
  n += std::to_string(layer);
  n += '.';
  auto obs = [&](ag::Var v, const char* name) { return unit::observe(t, v, n + name); };
  // Linears inside a branch keep their unconstrained scales; the split divides the branch's
  // mismatch out (UnitConfig::branch_linear_rules).
  const unit::Rules lr = uc.branch_linear_rules();
  const unit::Scales qkv_s = unit::linear(C, 3 * C, p.tokens, lr), o_s = unit::linear(C, C, p.tokens, lr);
  const unit::Scales fc_s = unit::linear(C, F, p.tokens, lr), out_s = unit::linear(F, C, p.tokens, lr);
  auto split = [&](const ag::Var& x, double tau, double mismatch) {
    return u ? unit::residual_split(t, x, tau, mismatch) : unit::ResidualSplit{x, x};
  };
  auto join = [&](const ag::Var& y, const unit::ResidualSplit& r, double tau, const Norm& ln, const char* name) {
    ag::Var x = u ? unit::residual_add(t, y, r.skip, tau) : ag::add(t, r.skip, y);
    return obs(pre ? x : layer_norm(t, x, ln, p.tokens), name);
  };

  // Attention over the non-padding keys.
  unit::ResidualSplit r = split(x_in, uc.tau_attn, unit::mismatch(qkv_s) * unit::mismatch(o_s));
  ag::Var h = pre ? obs(layer_norm(t, r.branch, b.ln_attn, p.tokens), "attn.ln") : r.branch;
  ag::Var qkv = ag::concat(t, {dense(t, h, b.q, qkv_s), dense(t, h, b.k, qkv_s), dense(t, h, b.v, qkv_s)});
  qkv = obs(ag::reshape(t, qkv, {p.B, p.T, 3 * C}), "attn.qkv");
  if (u) qkv = unit::unit_attention_qkv(t, qkv, H, uc.attn_mult, p.sdpa);
  ag::Var a = obs(ag::reshape(t, ag::key_padded_self_attention(t, qkv, H, p.key_len), {p.N, C}), "attn.sdpa");
  ag::Var y = obs(dense(t, a, b.o, o_s), "attn.proj");
  ag::Var x = join(y, r, uc.tau_attn, b.ln_attn, "attn.residual");

  // GELU MLP.
  r = split(x, uc.tau_mlp, unit::mismatch(fc_s) * unit::mismatch(gelu_scales()) * unit::mismatch(out_s));
  h = pre ? obs(layer_norm(t, r.branch, b.ln_mlp, p.tokens), "mlp.ln") : r.branch;
  ag::Var f = obs(gelu(t, dense(t, h, b.fc, fc_s)), "mlp.gelu");
  y = obs(dense(t, f, b.out, out_s), "mlp.proj");
  return join(y, r, uc.tau_mlp, b.ln_mlp, "mlp.residual");
}

ag::Var Bert::forward(ag::Tape& t, const Tensor& ids, const Tensor* rows) {
  const unit::UnitConfig& uc = config_.unit;
  const bool u = uc.enabled;
  const BertInputs in = bert_inputs(config_, ids);
  Pass p;
  p.B = ids.dim(0), p.T = ids.dim(1), p.N = p.B * p.T, p.tokens = in.tokens, p.key_len = in.key_len;
  const int64_t C = config_.d_model, V = config_.vocab();
  if (p.T > config_.context)
    throw std::invalid_argument("BERT: sequence length " + std::to_string(p.T) + " exceeds the context of " +
                                std::to_string(config_.context));
  if (u) {  // sequence length: the mean number of non-padding tokens
    const int64_t mean_len = std::max<int64_t>(1, std::llround(static_cast<double>(p.tokens) / static_cast<double>(p.B)));
    p.sdpa = unit::scaled_dot_product_attention(mean_len, C / config_.heads, false, uc.attn_mult);
  }
  const float tied = u ? static_cast<float>(1.0 / std::sqrt(2.0)) : 1.0f;  // the word table's two gradients

  // Embeddings: three unit tables summed with equal weights 3^-1/2 (unit), each gradient by its table's rule.
  ag::Var word = t.param(*word_);
  auto embed = [&](const Tensor& idx, const ag::Var& table, double bwd) {
    ag::Var e = ag::embedding(t, idx, table);
    if (!u) return e;
    const double rule = unit::embedding(table.dim(0), p.tokens).bwd[0];
    return ag::scale_split(t, e, static_cast<float>(1.0 / std::sqrt(3.0)), static_cast<float>(rule * bwd));
  };
  ag::Var x = embed(ids, word, tied);
  x = ag::add(t, x, embed(in.token_types, t.param(*type_), 1.0));
  x = ag::add(t, x, embed(in.positions, t.param(*position_), 1.0));
  x = unit::observe(t, layer_norm(t, ag::reshape(t, x, {p.N, C}), ln_embed_, p.tokens), "embedding");
  for (size_t l = 0; l < blocks_.size(); ++l) x = block(t, p, blocks_[l], std::move(x), l);
  if (config_.pre_norm) x = unit::observe(t, layer_norm(t, x, ln_final_, p.tokens), "ln_f");

  // MLM head on the predicted rows.
  const int64_t R = rows ? rows->numel() : p.N;
  if (rows) {
    x = ag::embedding(t, *rows, x);  // gathers x[rows]; backward scatters
    // Unit: the R row gradients spread over the non-padding rows, each scaled so that their RMS stays 1.
    if (u) x = ag::scale_split(t, x, 1.0f, static_cast<float>(std::sqrt(static_cast<double>(p.tokens) / static_cast<double>(R))));
  }
  ag::Var h = unit::observe(t, gelu(t, dense(t, x, head_dense_, unit::linear(C, C, R, uc.rules("linear")))), "head.gelu");
  h = unit::observe(t, layer_norm(t, h, ln_head_, R), "head.ln");
  ag::OpScales head;
  ag::Var bias = t.param(*decoder_bias_);
  if (u) {
    const unit::Scales s = unit::linear_readout(C, V, R, uc.rules("readout"));
    head = unit::op_scales(s);
    head.weight *= tied;
    bias = ag::scale_split(t, bias, 1.0f, static_cast<float>(s.bwd[1]));
  }
  const ag::ReadoutScope readout(t);
  ag::Var logits = unit::observe(t, ag::add_bias(t, ag::matmul(t, h, word, false, true, head), bias), "logits");
  return rows ? logits : ag::reshape(t, logits, {p.B, p.T, V});
}

namespace {
// The predicted positions of a batch: rows i32 [R] into the B*T positions and their targets [R].
std::pair<Tensor, Tensor> predicted(const Batch& batch) {
  const int32_t* tg = batch.targets.data<int32_t>();
  std::vector<int32_t> rows, targets;
  for (int64_t i = 0; i < batch.targets.numel(); ++i)
    if (tg[i] >= 0) rows.push_back(static_cast<int32_t>(i)), targets.push_back(tg[i]);
  const auto R = static_cast<int64_t>(rows.size());
  Tensor r = Tensor::empty({R}, DType::i32), y = Tensor::empty({R}, DType::i32);
  std::copy(rows.begin(), rows.end(), r.data<int32_t>());
  std::copy(targets.begin(), targets.end(), y.data<int32_t>());
  return {r, y};
}
}  // namespace

LossSum Bert::forward_backward(const Batch& batch, float grad_scale) {
  lm::check_batch(batch, config_.context, "BERT");
  if (const std::string why = cannot_train(); !why.empty()) throw std::invalid_argument(why);
  const auto picked = predicted(batch);
  const Tensor &rows = picked.first, &targets = picked.second;
  if (rows.numel() == 0) return {};
  ag::Tape t(context(true));
  return lm::forward_backward(t, [&](ag::Tape& tape) { return forward(tape, batch.inputs, &rows); }, targets,
                              config_.unit, grad_scale);
}

LossSum Bert::evaluate(const Batch& batch) {
  lm::check_batch(batch, config_.context, "BERT");
  const auto picked = predicted(batch);
  const Tensor &rows = picked.first, &targets = picked.second;
  if (rows.numel() == 0) return {};
  ag::NoGrad no_grad;
  ag::Tape t(context(false));
  const ag::Var z = forward(t, batch.inputs, &rows);
  ag::LossStats stats;
  lm::loss(t, z, targets, config_.unit, &stats);
  LossSum ls;
  ls.sum = stats.sum;
  ls.count = stats.count;
  const int64_t V = config_.vocab();
  for (int64_t r = 0; r < rows.numel(); ++r) {
    const float* row = z.value.f32() + r * V;
    ls.correct += std::max_element(row, row + V) - row == targets.data<int32_t>()[r];
  }
  return ls;
}

Tensor Bert::logits(const Tensor& ids) {
  ag::NoGrad no_grad;
  ag::Tape t(context(false));
  return forward(t, ids).value;
}

}  // namespace mantissa::nn
