#include "mantissa/nn/gpt.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/unit/ops.hpp"
#include "mantissa/nn/init.hpp"
#include "mantissa/tensor/checked.hpp"
#include "mantissa/io/untrusted.hpp"
#include "nn/fixed_keys.hpp"
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
  if (!(attn_dropout >= 0.0f && attn_dropout < 1.0f))
    throw std::invalid_argument("GPT config: attn_pdrop must be in [0, 1), got " + std::to_string(attn_dropout));
  unit.validate();
  if (unit.umup && !pre_norm)
    throw std::invalid_argument("GPT config: u-muP (parametrisation umup) needs pre-norm blocks; its depth rule "
                                "for the residual taus is the pre-norm one");
  // Embeddings [V, C] and [T, C] (an untied unit head [V, C] more), per
  // layer 12 C^2 + 13 C, final norm 2 C (pre-norm only; u-muP: no norm
  // parameters, 4 C and 2 C less).
  const char* what = "GPT config: parameter count";
  const int64_t C = d_model;
  const int64_t norm = unit.umup ? 0 : 2 * C;
  const int64_t per_layer = checked_add(checked_mul(12 * C, C, what), 9 * C + 2 * norm, what);
  int64_t n = checked_mul(checked_add(vocab * (unit.enabled ? 2 : 1), context, what), C, what);
  n = checked_add(n, checked_add(checked_mul(layers, per_layer, what), pre_norm ? norm : 0, what), what);
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
  j["attn_pdrop"] = attn_dropout;
  j["layer_norm_epsilon"] = 1e-5;
  j["initializer_range"] = 0.02;
  j["tie_word_embeddings"] = !unit.enabled;
  j["mantissa"] = {{"kind", "gpt"}, {"seed", seed}, {"dropout", dropout}};
  if (!pre_norm) j["mantissa"]["norm"] = "post";  // absent: pre-norm, GPT-2's layout
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
      read_norm(m, c.pre_norm, "GPT");
      read_parametrisation(m, c.unit, "GPT", /*umup=*/true);
    } else if (j.contains("resid_pdrop") && j["resid_pdrop"].is_number()) {
      c.dropout = j["resid_pdrop"].get<float>();
    }
    if (j.contains("attn_pdrop") && j["attn_pdrop"].is_number()) c.attn_dropout = j["attn_pdrop"].get<float>();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("GPT config: ") + e.what());
  }
  c.validate();
  const double drop = c.dropout;  // as the model keeps it
  require_fixed_keys(j, "GPT",
                     {{"model_type", "gpt2", "a GPT-2"},
                      {"activation_function", {"gelu_new", "gelu_pytorch_tanh"}, "the tanh approximation of GELU"},
                      {"n_inner", {nullptr, 4 * c.d_model}, "an MLP of 4 n_embd"},
                      {"n_ctx", c.context, "n_positions positions"},
                      {"layer_norm_epsilon", 1e-5, "LayerNorm with epsilon 1e-5"},
                      {"resid_pdrop", drop, "one dropout rate (mantissa.dropout) for residual branches and embeddings"},
                      {"embd_pdrop", drop, "one dropout rate (mantissa.dropout) for residual branches and embeddings"},
                      {"scale_attn_weights", true, "attention scaled by 1/sqrt(head size)"},
                      {"scale_attn_by_inverse_layer_idx", false, "attention scaled by 1/sqrt(head size)"},
                      {"tie_word_embeddings", !c.unit.enabled, c.unit.enabled ? "an untied readout" : "a tied readout"}});
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
  wte_ = add_parameter("transformer.wte.weight", {V, C}, autograd::Role::token_embedding, C);
  init_normal(wte_->value, rng, std_w);
  wpe_ = add_parameter("transformer.wpe.weight", {T, C}, autograd::Role::position_embedding, 1);
  init_normal(wpe_->value, rng, std_w);
  // A LayerNorm's gain (ones) and shift, and a Conv1D linear [in, out] with its bias.
  // u-muP's norms are non-parametric: no parameters, the norm applies the
  // constant gain and shift below.
  auto add_norm = [&](const std::string& n, int block) -> autograd::Parameter* {
    if (config_.unit.umup) return nullptr;
    autograd::Parameter* g = add_parameter(n + ".weight", {C}, autograd::Role::norm_gain, 1, block);
    g->value.fill(1.0f);
    g->bias = add_parameter(n + ".bias", {C}, autograd::Role::norm_bias, 1, block);
    return g;
  };
  if (config_.unit.umup) {
    norm_gain_ = Tensor::empty({C});
    norm_gain_.fill(1.0f);
    norm_shift_ = Tensor::empty({C});
    norm_shift_.fill(0.0f);
  }
  auto linear = [&](const std::string& n, int64_t in, int64_t out, double std, int block) {
    autograd::Parameter* w = add_parameter(n + ".weight", {in, out}, autograd::Role::weight, in, block);
    init_normal(w->value, rng, std);
    w->bias = add_parameter(n + ".bias", {out}, autograd::Role::bias, 1, block);
    return w;
  };
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    const int i = static_cast<int>(l);
    Block b{};
    b.ln1_w = add_norm(h + "ln_1", i);
    b.attn_w = linear(h + "attn.c_attn", C, 3 * C, std_w, i);
    b.proj_w = linear(h + "attn.c_proj", C, C, std_proj, i);
    b.ln2_w = add_norm(h + "ln_2", i);
    b.fc_w = linear(h + "mlp.c_fc", C, 4 * C, std_w, i);
    b.mlp_proj_w = linear(h + "mlp.c_proj", 4 * C, C, std_proj, i);
    // What each linear reads: pre-norm its own block's norm, post-norm the
    // norm before it (the previous block's ln_2, or none after the embedding).
    b.attn_w->input = config_.pre_norm ? b.ln1_w : blocks_.empty() ? nullptr : blocks_.back().ln2_w;
    b.proj_w->input = b.attn_w, b.proj_w->through = autograd::Parameter::Through::attention;
    b.fc_w->input = config_.pre_norm ? b.ln2_w : b.ln1_w;
    b.mlp_proj_w->input = b.fc_w, b.mlp_proj_w->through = autograd::Parameter::Through::pointwise;
    b.ln1_b = b.ln1_w ? b.ln1_w->bias : nullptr, b.attn_b = b.attn_w->bias, b.proj_b = b.proj_w->bias;
    b.ln2_b = b.ln2_w ? b.ln2_w->bias : nullptr, b.fc_b = b.fc_w->bias, b.mlp_proj_b = b.mlp_proj_w->bias;
    blocks_.push_back(b);
  }
  if (config_.pre_norm) lnf_w_ = add_norm("transformer.ln_f", -1);
  lnf_b_ = lnf_w_ ? lnf_w_->bias : nullptr;
  if (u) {  // u-muP unties the readout
    lm_head_ = add_parameter("lm_head.weight", {V, C}, autograd::Role::readout, C);
    init_normal(lm_head_->value, rng, 1.0);
  }
  (lm_head_ ? lm_head_ : wte_)->input = config_.pre_norm ? lnf_w_ : blocks_.back().ln2_w;
}

std::string GPT::cannot_train() const {
  if (config_.attn_dropout == 0.0f) return "";
  return "GPT: the config asks for attention dropout (attn_pdrop " + std::to_string(config_.attn_dropout) +
         "), which mantissa does not implement; set_dropout (train --init-from: --dropout) sets the residual and "
         "embedding dropout and makes the attention's 0";
}

void GPT::set_dropout(float p) {
  GPTConfig c = config_;
  c.dropout = p;
  c.attn_dropout = 0.0f;
  c.validate();
  config_ = c;
}

uint64_t GPT::pass_seed(bool training) {
  // Each training pass gets its own dropout stream derived from the seed.
  return config_.seed * 0x9E3779B97F4A7C15ull + (training ? ++passes_ : 0);
}

void GPT::check_batch(const Batch& batch) const { lm::check_batch(batch, config_.context, "GPT"); }

LossSum GPT::forward_backward(const Batch& batch, float grad_scale) {
  check_batch(batch);
  if (const std::string why = cannot_train(); !why.empty()) throw std::invalid_argument(why);
  ag::Tape t(context(true));
  return lm::forward_backward(t, parts(batch.inputs), batch.targets, config_.unit, grad_scale);
}

LossSum GPT::evaluate(const Batch& batch) {
  check_batch(batch);
  ag::NoGrad no_grad;
  ag::Tape t(context(false));
  return lm::evaluate(t, parts(batch.inputs), batch.targets, config_.unit);
}

Tensor GPT::logits(const Tensor& ids) {
  if (!ids.defined() || ids.dtype() != DType::i32 || ids.ndim() != 2) throw std::invalid_argument("GPT: ids must be i32 [B, T]");
  ag::NoGrad no_grad;
  ag::Tape t(context(false));
  return forward(t, ids).value;
}

}  // namespace mantissa::nn
