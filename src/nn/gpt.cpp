#include "mantissa/nn/gpt.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/unit/ops.hpp"
#include "mantissa/kernels/matmul.hpp"
#include "mantissa/nn/init.hpp"
#include "mantissa/tensor/checked.hpp"
#include "mantissa/tensor/memory_trace.hpp"
#include "mantissa/io/untrusted.hpp"
#include "nn/parametrisation.hpp"
#include "nn/causal_lm.hpp"

namespace mantissa::nn {
namespace ag = mantissa::autograd;

// ---- config --------------------------------------------------------------------------------
void GPTConfig::validate() const {
  check_dimension("GPT", "vocab", vocab);
  check_dimension("GPT", "context", context);
  check_dimension("GPT", "layers", layers, 1 << 16);
  check_dimension("GPT", "d_model", d_model, 1 << 16);
  check_dimension("GPT", "heads", heads, d_model);
  if (d_model % heads != 0)
    throw std::invalid_argument("GPT config: d_model " + std::to_string(d_model) + " is not divisible by heads " +
                                std::to_string(heads));
  if (!(dropout >= 0.0f && dropout < 1.0f))
    throw std::invalid_argument("GPT config: dropout must be in [0, 1), got " + std::to_string(dropout));
  unit.validate();
  // Embeddings [V, C] and [T, C] (an untied unit head [V, C] more), per
  // layer 12 C^2 + 13 C, final norm 2 C (u-muP: no norm parameters, 4 C and 2 C less).
  const char* what = "GPT config: parameter count";
  const int64_t C = d_model;
  const int64_t norm = unit.umup ? 0 : 2 * C;
  const int64_t per_layer = checked_add(checked_mul(12 * C, C, what), 9 * C + 2 * norm, what);
  int64_t n = checked_mul(checked_add(vocab * (unit.enabled ? 2 : 1), context, what), C, what);
  n = checked_add(n, checked_add(checked_mul(layers, per_layer, what), norm, what), what);
  check_parameter_total("GPT", n);
}

std::string GPTConfig::to_json() const {
  nlohmann::ordered_json j;
  j["model_type"] = "gpt2";
  j["architectures"] = {"GPT2LMHeadModel"};
  j["vocab_size"] = vocab;
  j["n_positions"] = context;
  j["n_ctx"] = context;
  j["n_embd"] = d_model;
  j["n_layer"] = layers;
  j["n_head"] = heads;
  j["n_inner"] = nullptr;
  j["activation_function"] = "gelu_new";
  j["resid_pdrop"] = dropout;
  j["embd_pdrop"] = dropout;
  j["attn_pdrop"] = 0.0;
  j["layer_norm_epsilon"] = 1e-5;
  j["initializer_range"] = 0.02;
  j["tie_word_embeddings"] = !unit.enabled;
  j["mantissa"] = {{"kind", "gpt"}, {"seed", seed}, {"dropout", dropout}};
  write_parametrisation(j["mantissa"], unit);
  return j.dump(2);
}

GPTConfig GPTConfig::from_json(const std::string& text) {
  const nlohmann::json j = io::parse_json(text, "GPT config");
  GPTConfig c;
  auto get = [&](const char* key, int64_t& out) {
    if (!j.contains(key)) throw std::invalid_argument(std::string("GPT config: missing key '") + key + "'");
    if (!j[key].is_number_integer()) throw std::invalid_argument(std::string("GPT config: '") + key + "' must be an integer");
    out = j[key].get<int64_t>();
  };
  get("vocab_size", c.vocab);
  get("n_positions", c.context);
  get("n_embd", c.d_model);
  get("n_layer", c.layers);
  get("n_head", c.heads);
  if (!j.is_object()) throw std::invalid_argument("GPT config: not a JSON object");
  try {
    if (j.contains("mantissa") && j["mantissa"].is_object()) {
      const auto& m = j["mantissa"];
      if (m.contains("seed")) c.seed = m["seed"].get<uint64_t>();
      if (m.contains("dropout")) c.dropout = m["dropout"].get<float>();
      read_parametrisation(m, c.unit, "GPT", /*umup=*/true);
    } else if (j.contains("resid_pdrop") && j["resid_pdrop"].is_number()) {
      c.dropout = j["resid_pdrop"].get<float>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("GPT config: ") + e.what());
  }
  c.validate();
  return c;
}

// ---- construction ------------------------------------------------------------------------------
GPT::GPT(const GPTConfig& config) : config_(config) {
  config_.validate();
  const int64_t V = config_.vocab, T = config_.context, C = config_.d_model, L = config_.layers;
  Rng rng(config_.seed);
  // Unit scaling: every weight N(0, 1); the per-op scales do the rest.
  const bool u = config_.unit.enabled;
  const double std_w = u ? 1.0 : 0.02, std_proj = u ? 1.0 : 0.02 / std::sqrt(2.0 * static_cast<double>(L));
  wte_ = add_parameter("transformer.wte.weight", {V, C}, Role::token_embedding, C);
  init_normal(wte_->value, rng, std_w);
  wpe_ = add_parameter("transformer.wpe.weight", {T, C}, Role::position_embedding, 1);
  init_normal(wpe_->value, rng, std_w);
  // A LayerNorm's gain (ones) and shift, and a Conv1D linear [in, out] with its bias.
  // u-muP's norms are non-parametric: no parameters, the norm applies the
  // constant gain and shift below.
  auto norm = [&](const std::string& n, int block) -> Parameter* {
    if (config_.unit.umup) return nullptr;
    Parameter* g = add_parameter(n + ".weight", {C}, Role::norm_gain, 1, block);
    g->value.fill(1.0f);
    g->bias = add_parameter(n + ".bias", {C}, Role::norm_bias, 1, block);
    return g;
  };
  if (config_.unit.umup) {
    norm_gain_ = Tensor::empty({C});
    norm_gain_.fill(1.0f);
    norm_shift_ = Tensor::empty({C});
    norm_shift_.fill(0.0f);
  }
  auto linear = [&](const std::string& n, int64_t in, int64_t out, double std, int block) {
    Parameter* w = add_parameter(n + ".weight", {in, out}, Role::weight, in, block);
    init_normal(w->value, rng, std);
    w->bias = add_parameter(n + ".bias", {out}, Role::bias, 1, block);
    return w;
  };
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    const int i = static_cast<int>(l);
    Block b{};
    b.ln1_w = norm(h + "ln_1", i);
    b.attn_w = linear(h + "attn.c_attn", C, 3 * C, std_w, i);
    b.proj_w = linear(h + "attn.c_proj", C, C, std_proj, i);
    b.ln2_w = norm(h + "ln_2", i);
    b.fc_w = linear(h + "mlp.c_fc", C, 4 * C, std_w, i);
    b.mlp_proj_w = linear(h + "mlp.c_proj", 4 * C, C, std_proj, i);
    b.attn_w->input = b.ln1_w;
    b.proj_w->input = b.attn_w, b.proj_w->through = Parameter::Through::attention;
    b.fc_w->input = b.ln2_w;
    b.mlp_proj_w->input = b.fc_w, b.mlp_proj_w->through = Parameter::Through::pointwise;
    b.ln1_b = b.ln1_w ? b.ln1_w->bias : nullptr, b.attn_b = b.attn_w->bias, b.proj_b = b.proj_w->bias;
    b.ln2_b = b.ln2_w ? b.ln2_w->bias : nullptr, b.fc_b = b.fc_w->bias, b.mlp_proj_b = b.mlp_proj_w->bias;
    blocks_.push_back(b);
  }
  lnf_w_ = norm("transformer.ln_f", -1);
  lnf_b_ = lnf_w_ ? lnf_w_->bias : nullptr;
  if (u) {  // u-muP unties the readout
    lm_head_ = add_parameter("lm_head.weight", {V, C}, Role::readout, C);
    init_normal(lm_head_->value, rng, 1.0);
  }
  (lm_head_ ? lm_head_ : wte_)->input = lnf_w_;
}

uint64_t GPT::pass_seed(bool training) {
  // Each training pass gets its own dropout stream derived from the seed.
  return config_.seed * 0x9E3779B97F4A7C15ull + (training ? ++passes_ : 0);
}

// ---- forward ------------------------------------------------------------------------------------
namespace {
// Moves a Var out so that its value dies with the op call it is passed to:
// forward values are dropped as soon as their last consumer ran (what the
// backward pass needs, the ops saved themselves).
ag::Var take(ag::Var& v) { return std::move(v); }
}  // namespace

// One pre-LN block on the residual stream x [B, T, C].
// Every op output passes through observe() (a no-op unless a scale analysis
// set an observer), named "h<layer>.<op>"; the memory trace (bench_train
// --memory-trace) labels the op's allocations with the same name.
ag::Var GPT::block(ag::Tape& t, const Block& b, ag::Var x_in, size_t layer) {
  const float p = config_.dropout;
  std::string n("h");  // (not "h" + ...: GCC 12 -Wrestrict false positive)
  n += std::to_string(layer);
  n += '.';
  auto op = [&](const char* name, auto&& f) {
    const std::string full = n + name;
    MemoryLabel label(full);
    return ag::observe(t, f(), full);
  };
  ag::Var h = op("attn.ln", [&] { return ag::layer_norm(t, x_in, t.param(*b.ln1_w), t.param(*b.ln1_b)); });
  ag::Var qkv = op("attn.qkv", [&] {  // [B, T, 3C]
    ag::Var bias = t.param(*b.attn_b);
    return ag::linear(t, take(h), t.param(*b.attn_w), &bias);
  });
  ag::Var a = op("attn.sdpa", [&] { return ag::causal_self_attention(t, take(qkv), config_.heads); });  // [B, T, C]
  ag::Var y = op("attn.proj", [&] {
    ag::Var bias = t.param(*b.proj_b);
    return ag::dropout(t, ag::linear(t, take(a), t.param(*b.proj_w), &bias), p);
  });
  ag::Var x = op("attn.residual", [&] { return ag::add(t, take(x_in), take(y)); });
  h = op("mlp.ln", [&] { return ag::layer_norm(t, x, t.param(*b.ln2_w), t.param(*b.ln2_b)); });
  ag::Var f = op("mlp.fc", [&] {  // [B, T, 4C]
    ag::Var bias = t.param(*b.fc_b);
    return ag::linear(t, take(h), t.param(*b.fc_w), &bias);
  });
  f = op("mlp.gelu", [&] { return ag::gelu(t, take(f)); });
  y = op("mlp.proj", [&] {
    ag::Var bias = t.param(*b.mlp_proj_b);
    return ag::dropout(t, ag::linear(t, take(f), t.param(*b.mlp_proj_w), &bias), p);
  });
  return op("mlp.residual", [&] { return ag::add(t, take(x), take(y)); });
}

// ids [B, T] -> logits [B, T, V]; x is the residual stream [B, T, C].
ag::Var GPT::forward(ag::Tape& t, const Tensor& ids) {
  if (config_.unit.enabled) return unit_forward(t, ids);
  const int64_t B = ids.dim(0), T = ids.dim(1), C = config_.d_model, V = config_.vocab;
  ag::Var wte = t.param(*wte_);
  ag::Var x;
  {
    MemoryLabel label("embedding");
    x = ag::observe(t, ag::dropout(t, ag::token_position_embedding(t, ids, wte, t.param(*wpe_)), config_.dropout),
                    "embedding");
  }
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    if (checkpoint_every_ > 0 && l % static_cast<size_t>(checkpoint_every_) == 0)
      x = ag::checkpoint(t, x, [this, &b, l](ag::Tape& inner, const ag::Var& xin) { return block(inner, b, xin, l); });
    else
      x = block(t, b, std::move(x), l);
  }
  {
    MemoryLabel label("ln_f");
    x = ag::observe(t, ag::layer_norm(t, x, t.param(*lnf_w_), t.param(*lnf_b_)), "ln_f");
  }
  // Tied head: logits [B*T, V] = x [B*T, C] @ wte^T.
  MemoryLabel label("logits");
  const ag::ReadoutScope readout(t);
  ag::Var logits = ag::observe(t, ag::matmul(t, ag::reshape(t, take(x), {B * T, C}), wte, false, true), "logits");
  return ag::reshape(t, logits, {B, T, V});
}

void GPT::check_batch(const Batch& batch) const { lm::check_batch(batch, config_.context, "GPT"); }

LossSum GPT::forward_backward(const Batch& batch, float grad_scale) {
  check_batch(batch);
  ag::Tape t(context(true));
  return lm::forward_backward(t, [&](ag::Tape& tape) { return forward(tape, batch.inputs); }, batch.targets,
                              config_.unit, grad_scale);
}

LossSum GPT::evaluate(const Batch& batch) {
  check_batch(batch);
  ag::NoGrad no_grad;
  ag::Tape t(context(false));
  return lm::evaluate(t, [&](ag::Tape& tape) { return forward(tape, batch.inputs); }, batch.targets, config_.unit);
}

Tensor GPT::logits(const Tensor& ids) {
  if (!ids.defined() || ids.dtype() != DType::i32 || ids.ndim() != 2) throw std::invalid_argument("GPT: ids must be i32 [B, T]");
  ag::NoGrad no_grad;
  ag::Tape t(context(false));
  return forward(t, ids).value;
}

}  // namespace mantissa::nn
