// The Llama-style decoder, standard and unit-scaled from one forward code:
// the unit scales (unit/rules.hpp) are 1 in the standard parametrisation.
//   x = embed[ids]                                     [B, T, C]
//   per block: x = x + o(attn(rope(q, k), v)(rms(x)))  q [B, T, C], k/v [B, T, KV*D]
//              x = x + down(silu(gate h) * up h), h = rms(x)     gate/up [B, T, F]
//   logits = rms(x) @ head^T                           [B, T, V]
#include "mantissa/nn/llama.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/autograd/ops_gated.hpp"
#include "mantissa/autograd/ops_rotary.hpp"
#include "mantissa/unit/ops.hpp"
#include "mantissa/io/untrusted.hpp"
#include "mantissa/tensor/checked.hpp"
#include "nn/parametrisation.hpp"
#include "mantissa/nn/init.hpp"
#include "nn/causal_lm.hpp"
#include "nn/fixed_keys.hpp"

namespace mantissa::nn {
namespace ag = mantissa::autograd;

// ---- config --------------------------------------------------------------------------------
int64_t LlamaConfig::ffn() const {
  if (hidden > 0) return hidden;
  const int64_t m = static_cast<int64_t>(std::llround(8.0 * static_cast<double>(d_model) / 3.0 / 64.0));
  return 64 * (m < 1 ? 1 : m);
}

void LlamaConfig::validate() const {
  check_dimension("Llama", "vocab", vocab);
  check_dimension("Llama", "context", context);
  check_dimension("Llama", "layers", layers);
  check_dimension("Llama", "d_model", d_model);
  check_dimension("Llama", "heads", heads);
  if (kv_heads < 0) throw std::invalid_argument("Llama config: kv_heads must not be negative, got " + std::to_string(kv_heads));
  if (hidden < 0) throw std::invalid_argument("Llama config: hidden must not be negative, got " + std::to_string(hidden));
  check_dimension("Llama", "intermediate size", ffn());
  if (d_model % heads != 0 || (d_model / heads) % 2 != 0)
    throw std::invalid_argument("Llama config: d_model " + std::to_string(d_model) + " / heads " + std::to_string(heads) +
                                " must be an even integer (rotary pairs)");
  if (heads % kv() != 0)
    throw std::invalid_argument("Llama config: heads " + std::to_string(heads) + " is not a multiple of kv_heads " +
                                std::to_string(kv()));
  // Both are applied in float32: a double that is finite may not be.
  if (!(rms_eps > 0) || !std::isfinite(static_cast<float>(rms_eps)) || static_cast<float>(rms_eps) == 0.0f)
    throw std::invalid_argument("Llama config: rms_norm_eps must be positive and finite in float32, got " +
                                io::excerpt_json(rms_eps));
  if (!(rope_theta > 1) || !std::isfinite(static_cast<float>(rope_theta)))
    throw std::invalid_argument("Llama config: rope_theta must be > 1 and finite in float32, got " +
                                io::excerpt_json(rope_theta));
  if (unit.enabled && tie_embeddings)
    throw std::invalid_argument("Llama config: the unit-scaled model has an untied readout (drop the embedding tie)");
  // Embedding [V, C] (and an untied head); per layer q and o [C, C], k and v
  // [C, kv hs], gate, up and down [C, F] (norm weights left out).
  const char* what = "Llama config: parameter count";
  const int64_t C = d_model, F = ffn(), kv_width = kv() * (d_model / heads);
  int64_t per_layer = checked_mul(2 * C, C, what);
  per_layer = checked_add(per_layer, checked_mul(2 * C, kv_width, what), what);
  per_layer = checked_add(per_layer, checked_mul(3 * C, F, what), what);
  int64_t n = checked_mul(tie_embeddings ? vocab : 2 * vocab, C, what);
  n = checked_add(n, checked_mul(layers, per_layer, what), what);
  check_parameter_total("Llama", n);
  unit.validate();
}

std::string LlamaConfig::to_json() const {
  nlohmann::ordered_json j;
  j["model_type"] = "llama";
  j["architectures"] = {"LlamaForCausalLM"};
  j["vocab_size"] = vocab;
  j["hidden_size"] = d_model;
  j["intermediate_size"] = ffn();
  j["num_hidden_layers"] = layers;
  j["num_attention_heads"] = heads;
  j["num_key_value_heads"] = kv();
  j["head_dim"] = d_model / heads;
  j["max_position_embeddings"] = context;
  j["rms_norm_eps"] = rms_eps;
  j["rope_theta"] = rope_theta;
  j["rope_scaling"] = nullptr;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  j["tie_word_embeddings"] = tie_embeddings;
  j["torch_dtype"] = "float32";
  j["mantissa"] = {{"kind", "llama"}, {"seed", seed}, {"smooth_swiglu", smooth_swiglu}};
  write_parametrisation(j["mantissa"], unit);
  return j.dump(2);
}

LlamaConfig LlamaConfig::from_json(const std::string& text) {
  const nlohmann::json j = io::parse_json(text, "Llama config");
  if (!j.is_object()) throw std::invalid_argument("Llama config: not a JSON object");
  LlamaConfig c;
  auto get = [&](const char* key, int64_t& out) {
    if (!j.contains(key)) throw std::invalid_argument(std::string("Llama config: missing key '") + key + "'");
    if (!j[key].is_number_integer()) throw std::invalid_argument(std::string("Llama config: '") + key + "' must be an integer");
    out = j[key].get<int64_t>();
  };
  auto number = [&](const char* key, double& out) {
    if (!j.contains(key)) return;
    if (!j[key].is_number()) throw std::invalid_argument(std::string("Llama config: '") + key + "' must be a number");
    out = j[key].get<double>();
  };
  get("vocab_size", c.vocab);
  get("max_position_embeddings", c.context);
  get("hidden_size", c.d_model);
  get("num_hidden_layers", c.layers);
  get("num_attention_heads", c.heads);
  get("intermediate_size", c.hidden);
  if (j.contains("num_key_value_heads")) get("num_key_value_heads", c.kv_heads);
  number("rms_norm_eps", c.rms_eps);
  number("rope_theta", c.rope_theta);
  // transformers 5 writes rotary settings as "rope_parameters": {"rope_type", "rope_theta", ...}.
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const nlohmann::json& r = j["rope_parameters"];
    if (!r.is_object()) throw std::invalid_argument("Llama config: 'rope_parameters' must be an object");
    if (r.contains("rope_type") && r["rope_type"] != "default")  // first: it names what the others mean
      throw std::invalid_argument("Llama config: 'rope_parameters.rope_type' is " + io::excerpt_json(r["rope_type"]) +
                                  ", but mantissa's Llama computes unscaled rotary positions (accepted: \"default\")");
    for (auto it = r.begin(); it != r.end(); ++it) {
      if (it.key() == "rope_type") {
        continue;
      } else if (it.key() == "rope_theta") {
        if (!it.value().is_number()) throw std::invalid_argument("Llama config: 'rope_parameters.rope_theta' must be a number");
        const double theta = it.value().get<double>();
        if (j.contains("rope_theta") && j["rope_theta"].is_number() && j["rope_theta"].get<double>() != theta)
          throw std::invalid_argument("Llama config: 'rope_theta' and 'rope_parameters.rope_theta' disagree");
        c.rope_theta = theta;
      } else {
        throw std::invalid_argument("Llama config: 'rope_parameters." + it.key() +
                                    "' is not read by mantissa's Llama, which computes unscaled rotary positions "
                                    "from rope_theta");
      }
    }
  }
  try {
    if (j.contains("tie_word_embeddings")) c.tie_embeddings = j["tie_word_embeddings"].get<bool>();
    if (j.contains("mantissa") && j["mantissa"].is_object()) {
      const auto& m = j["mantissa"];
      if (m.contains("seed")) c.seed = m["seed"].get<uint64_t>();
      if (m.contains("smooth_swiglu")) c.smooth_swiglu = m["smooth_swiglu"].get<bool>();
      read_parametrisation(m, c.unit, "Llama");
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("Llama config: ") + e.what());
  }
  c.validate();
  require_fixed_keys(j, "Llama",
                     {{"model_type", "llama", "a Llama"},
                      {"hidden_act", "silu", "SwiGLU with SiLU"},
                      {"rope_scaling", nullptr, "unscaled rotary positions"},
                      {"head_dim", c.d_model / c.heads, "heads of hidden_size / num_attention_heads"},
                      {"attention_bias", false, "projections without bias"},
                      {"mlp_bias", false, "projections without bias"},
                      {"attention_dropout", 0, "attention without dropout"}});
  return c;
}

// ---- construction ------------------------------------------------------------------------------
autograd::Parameter* Llama::add(std::string name, const Shape& shape, autograd::Role role, int64_t fan_in, int block, double std, Rng& rng) {
  autograd::Parameter* p = add_parameter(std::move(name), shape, role, fan_in, block);
  if (std > 0) init_normal(p->value, rng, std);
  else p->value.fill(1.0f);
  return p;
}

Llama::Llama(const LlamaConfig& config) : config_(config) {
  config_.validate();
  const int64_t V = config_.vocab, C = config_.d_model, F = config_.ffn(), KC = config_.kv() * (C / config_.heads);
  Rng rng(config_.seed);
  const double s = config_.unit.enabled ? 1.0 : 0.02;
  embed_ = add("model.embed_tokens.weight", {V, C}, autograd::Role::token_embedding, C, -1, s, rng);
  for (int64_t l = 0; l < config_.layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    const int i = static_cast<int>(l);
    Block b{};
    b.ln1 = add(h + "input_layernorm.weight", {C}, autograd::Role::norm_gain, 1, i, 0, rng);
    b.q = add(h + "self_attn.q_proj.weight", {C, C}, autograd::Role::weight, C, i, s, rng);
    b.k = add(h + "self_attn.k_proj.weight", {KC, C}, autograd::Role::weight, C, i, s, rng);
    b.v = add(h + "self_attn.v_proj.weight", {KC, C}, autograd::Role::weight, C, i, s, rng);
    b.o = add(h + "self_attn.o_proj.weight", {C, C}, autograd::Role::weight, C, i, s, rng);
    b.ln2 = add(h + "post_attention_layernorm.weight", {C}, autograd::Role::norm_gain, 1, i, 0, rng);
    b.gate = add(h + "mlp.gate_proj.weight", {F, C}, autograd::Role::weight, C, i, s, rng);
    b.up = add(h + "mlp.up_proj.weight", {F, C}, autograd::Role::weight, C, i, s, rng);
    b.down = add(h + "mlp.down_proj.weight", {C, F}, autograd::Role::weight, F, i, s, rng);
    // What each product reads, for scale propagation (Parameter::input): the attention mixes v's
    // rows with scores from q and k (rotary keeps their scales); the MLP multiplies silu(gate) by up.
    b.q->input = b.k->input = b.v->input = b.ln1;
    b.o->input = b.v, b.o->through = autograd::Parameter::Through::attention, b.o->query = b.q, b.o->key = b.k;
    b.gate->input = b.up->input = b.ln2;
    // Smooth-SwiGLU rescales the product's channels by the batch's own amax: no propagated scale.
    if (!config_.smooth_swiglu) b.down->input = b.up, b.down->through = autograd::Parameter::Through::gated, b.down->gate = b.gate;
    blocks_.push_back(b);
  }
  norm_ = add("model.norm.weight", {C}, autograd::Role::norm_gain, 1, -1, 0, rng);
  head_ = config_.tie_embeddings ? embed_ : add("lm_head.weight", {V, C}, autograd::Role::readout, C, -1, s, rng);
  head_->input = norm_;
}

// ---- forward ------------------------------------------------------------------------------------
namespace {
unit::Scales one(size_t inputs) { return {1.0, std::vector<double>(inputs, 1.0)}; }

// Per-channel power-of-two scales [F] bringing each column's amax of h [N, F] to ~1 (1 for zero columns).
Tensor smooth_scales(const Tensor& h) {
  const int64_t F = h.dim(-1), N = h.numel() / F;
  std::vector<float> amax(static_cast<size_t>(F), 0.0f);
  const float* x = h.f32();
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < F; ++c) amax[static_cast<size_t>(c)] = std::fmax(amax[static_cast<size_t>(c)], std::fabs(x[i * F + c]));
  Tensor s = Tensor::empty({F});
  for (int64_t c = 0; c < F; ++c) {
    const float a = amax[static_cast<size_t>(c)];
    s.f32()[c] = a > 0 && std::isfinite(a) ? std::exp2(-std::round(std::log2(a))) : 1.0f;
  }
  return s;
}
}  // namespace

// One pre-RMSNorm block on the residual stream x [B, T, C].
ag::Var Llama::block(ag::Tape& t, const Block& b, ag::Var x_in, size_t layer) {
  const unit::UnitConfig& uc = config_.unit;
  const bool u = uc.enabled;
  const int64_t B = x_in.dim(0), T = x_in.dim(1), C = config_.d_model, N = B * T, H = config_.heads, KV = config_.kv();
  const int64_t D = C / H, KC = KV * D, F = config_.ffn();
  const float eps = static_cast<float>(config_.rms_eps);
  std::string n("h");  // (not "h" + ...: GCC 12 -Wrestrict false positive)
  n += std::to_string(layer);
  n += '.';
  auto obs = [&](ag::Var v, const char* name) { return unit::observe(t, v, n + name); };
  // Inside a residual branch the linears keep their unconstrained scales (unit output and unit
  // input gradient, as the library's uu.MLP): every path through the branch crosses alike
  // scales, so its gradients are scaled gradients, and residual_split divides the mismatch out.
  const unit::Rules branch_rules = uc.branch_linear_rules();
  // x [N, in] @ w [out, in]^T. Products reading one input (q, k, v; gate, up) are scaled as the
  // one product of width `fused` they form (the GPT's c_attn): their input gradients sum.
  auto scales = [&](int64_t in, int64_t fused) { return unit::linear(in, fused, N, branch_rules); };
  auto lin = [&](const ag::Var& x, autograd::Parameter* w, const unit::Scales& s) {
    return ag::matmul(t, x, t.param(*w), false, true, u ? unit::op_scales(s) : ag::OpScales{});
  };
  const unit::Scales rms_s = u ? unit::rms_norm(C, N * C) : one(2);

  // Attention.
  const unit::Scales qkv_s = scales(C, C + 2 * KC), o_s = scales(C, C);
  // The backward sums H/KV head gradients into each kv head; q, k and v take the same
  // backward factor so that the three paths through the branch stay alike.
  const double kv_g = H != KV ? 1.0 / std::sqrt(static_cast<double>(H / KV)) : 1.0;
  unit::ResidualSplit r = u ? unit::residual_split(t, x_in, uc.tau_attn, unit::mismatch(qkv_s) * kv_g * unit::mismatch(o_s))
                          : unit::ResidualSplit{x_in, x_in};
  ag::Var h = obs(ag::reshape(t, unit::unit_rms_norm(t, r.branch, t.param(*b.ln1), rms_s, eps), {N, C}), "attn.ln");
  ag::Var q = ag::reshape(t, lin(h, b.q, qkv_s), {B, T, C});
  ag::Var k = ag::reshape(t, lin(h, b.k, qkv_s), {B, T, KC});
  ag::Var v = ag::reshape(t, lin(h, b.v, qkv_s), {B, T, KC});
  if (u && H != KV) {
    const auto g = static_cast<float>(kv_g);
    q = ag::scale_split(t, q, 1.0f, g);
    k = ag::scale_split(t, k, 1.0f, g);
    v = ag::scale_split(t, v, 1.0f, g);
  }
  ag::Var qkv = obs(ag::rotary_qkv(t, q, k, v, H, KV, config_.rope_theta), "attn.qkv");
  ag::Var a = u ? unit::unit_causal_self_attention(t, qkv, H, uc.attn_mult,
                                                 unit::scaled_dot_product_attention(T, D, true, uc.attn_mult))
                : ag::causal_self_attention(t, qkv, H);
  a = obs(a, "attn.sdpa");
  ag::Var y = obs(ag::reshape(t, lin(ag::reshape(t, a, {N, C}), b.o, o_s), {B, T, C}), "attn.proj");
  ag::Var x = obs(u ? unit::residual_add(t, y, r.skip, uc.tau_attn) : ag::add(t, x_in, y), "attn.residual");

  // SwiGLU MLP: gate and up as one product of width 2F, the product scaled by its own rule
  // (unit::silu_glu; both its input gradients alike, so the two paths stay alike).
  const unit::Scales gate_s = scales(C, 2 * F), down_s = scales(F, C);
  const unit::Scales glu = u ? unit::silu_glu(1.0, uc.rules("silu")) : one(2);
  r = u ? unit::residual_split(t, x, uc.tau_mlp, unit::mismatch(gate_s) * unit::mismatch(glu) * unit::mismatch(down_s))
        : unit::ResidualSplit{x, x};
  h = obs(ag::reshape(t, unit::unit_rms_norm(t, r.branch, t.param(*b.ln2), rms_s, eps), {N, C}), "mlp.ln");
  ag::Var gate = obs(lin(h, b.gate, gate_s), "mlp.gate");
  ag::Var up = obs(lin(h, b.up, gate_s), "mlp.up");
  // swiglu: y = alpha silu(g) u, dup = alpha silu(g) dy, dgate = beta silu'(g) u dy.
  if (u && glu.bwd[1] != glu.fwd) up = ag::scale_split(t, up, 1.0f, static_cast<float>(glu.bwd[1] / glu.fwd));
  ag::Var f = obs(ag::swiglu(t, gate, up, static_cast<float>(glu.fwd), static_cast<float>(glu.bwd[0])), "mlp.swiglu");
  ag::Var down;
  if (config_.smooth_swiglu) {
    const Tensor s = smooth_scales(f.value);
    Tensor inv = Tensor::empty({F});
    for (int64_t c = 0; c < F; ++c) inv.f32()[c] = 1.0f / s.f32()[c];
    down = ag::matmul(t, ag::scale_channels(t, f, s), ag::scale_channels(t, t.param(*b.down), inv), false, true,
                      u ? unit::op_scales(down_s) : ag::OpScales{});
  } else {
    down = lin(f, b.down, down_s);
  }
  y = obs(ag::reshape(t, down, {B, T, C}), "mlp.proj");
  return obs(u ? unit::residual_add(t, y, r.skip, uc.tau_mlp) : ag::add(t, x, y), "mlp.residual");
}

// ids [B, T] -> logits [B, T, V].
ag::Var Llama::forward(ag::Tape& t, const Tensor& ids) {
  const int64_t B = ids.dim(0), T = ids.dim(1);
  return ag::reshape(t, head(t, hidden(t, ids), B * T), {B, T, config_.vocab});
}

lm::Forward Llama::parts(const Tensor& ids) {
  const int64_t N = ids.numel();
  return {[this, &ids](ag::Tape& t) { return hidden(t, ids); },
          [this, N](ag::Tape& t, const ag::Var& x) { return head(t, x, N); }, config_.vocab};
}

// ids [B, T] -> the final hidden state x [N, C] (after the last RMSNorm).
ag::Var Llama::hidden(ag::Tape& t, const Tensor& ids) {
  const unit::UnitConfig& uc = config_.unit;
  const bool u = uc.enabled;
  const int64_t B = ids.dim(0), T = ids.dim(1), C = config_.d_model, V = config_.vocab, N = B * T;
  ag::Var embed = t.param(*embed_);
  ag::Var x = ag::embedding(t, ids, embed);
  if (u) x = ag::scale_split(t, x, 1.0f, static_cast<float>(unit::embedding(V, N).bwd[0]));
  x = unit::observe(t, x, "embedding");
  for (size_t l = 0; l < blocks_.size(); ++l) x = block(t, blocks_[l], std::move(x), l);
  x = unit::unit_rms_norm(t, x, t.param(*norm_), u ? unit::rms_norm(C, N * C) : one(2), static_cast<float>(config_.rms_eps));
  x = unit::observe(t, x, "ln_f");
  return ag::reshape(t, x, {N, C});
}

// Logits [rows, V] = x [rows, C] @ head [V, C]^T (the embedding when tied);
// N, the batch's rows, sets the unit readout's scales.
ag::Var Llama::head(ag::Tape& t, const ag::Var& x, int64_t N) {
  const unit::UnitConfig& uc = config_.unit;
  const int64_t C = config_.d_model, V = config_.vocab;
  const ag::OpScales scales =
      uc.enabled ? unit::op_scales(unit::linear_readout(C, V, N, uc.rules("readout"))) : ag::OpScales{};
  const ag::ReadoutScope readout(t);
  return unit::observe(t, ag::matmul(t, x, t.param(*head_), false, true, scales), "logits");
}

LossSum Llama::forward_backward(const Batch& batch, float grad_scale) {
  lm::check_batch(batch, config_.context, "Llama");
  ag::Tape t(context(true));
  return lm::forward_backward(t, parts(batch.inputs), batch.targets, config_.unit, grad_scale);
}

LossSum Llama::evaluate(const Batch& batch) {
  lm::check_batch(batch, config_.context, "Llama");
  ag::NoGrad no_grad;
  ag::Tape t(context(false));
  return lm::evaluate(t, parts(batch.inputs), batch.targets, config_.unit);
}

Tensor Llama::logits(const Tensor& ids) {
  if (!ids.defined() || ids.dtype() != DType::i32 || ids.ndim() != 2) throw std::invalid_argument("Llama: ids must be i32 [B, T]");
  ag::NoGrad no_grad;
  ag::Tape t(context(false));
  return forward(t, ids).value;
}

}  // namespace mantissa::nn
