// The mixed-precision step: scaled backward, one unscale per optimizer step,
// skip on non-finite gradients, clip, update the fp32 masters, round them
// into the working format. See amp.hpp for the protocol.
#include "mantissa/amp/amp.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include "mantissa/formats/convert.hpp"
#include "mantissa/optim/clip.hpp"
#include "mantissa/quant/fp4.hpp"
#include "mantissa/quant/fp8.hpp"
#include "mantissa/scalify/scalify_quantiser.hpp"

namespace mantissa::amp {
namespace {

// The dtype the engine's precision policy computes in: f32, bf16 or f16.
DType policy_dtype(const std::string& role, const recipe::FormatSetting& format) {
  const std::optional<DType> t = recipe::exact_dtype(format.value());
  if (t == DType::f32 || t == DType::bf16 || t == DType::f16) return *t;
  throw std::invalid_argument("recipe setting " + role + " = '" + format.name() +
                              "' cannot be run by the engine's precision policy (valid: fp32, bf16, fp16)");
}

// Saved activations may also be 1-byte FP8 codes (Tape::save: per-tensor
// power-of-two scale from the tensor's amax).
DType saved_dtype(const recipe::FormatSetting& format) {
  if (const std::optional<DType> t = recipe::exact_dtype(format.value())) return *t;
  throw std::invalid_argument("recipe setting saved_format = '" + format.name() +
                              "' cannot be run by the engine's precision policy (valid: fp32, bf16, fp16, e4m3fn, "
                              "e5m2, e4m3fnuz, e5m2fnuz)");
}

bool is_fp32(const formats::Format& f) { return recipe::exact_dtype(f) == DType::f32; }

// The format the diagnostics measure against: the recipe's gradient format
// if it is low precision, else its matmul format (where activation gradients
// live), else fp16 (what a switch to fp16 would face).
formats::Format diagnostic_format(const recipe::Recipe& r) {
  if (!is_fp32(r.gradient_format.value())) return r.gradient_format.value();
  if (!is_fp32(r.matmul_format.value())) return r.matmul_format.value();
  return formats::preset("fp16");
}

std::optional<formats::Format> optional_format(const formats::Format* f) {
  return f ? std::optional<formats::Format>(*f) : std::nullopt;
}

// The FP4 quantiser's settings; negative bf16_layers count from the model's last block.
quant::Fp4Config fp4_config(const recipe::Fp4Settings& f, nn::Model* model) {
  quant::Fp4Config c;
  c.format = f.format.value().value_or(formats::Fp4Scale::mxfp4);
  c.forward = f.forward;
  c.backward = f.backward;
  c.weight_2d = f.weight_2d;
  c.rht = f.rht.value();
  c.sr_gradients = f.sr.value() != recipe::Fp4Rounding::none;
  c.sr_operands = f.sr.value() == recipe::Fp4Rounding::backward;
  c.rht_dgrad = f.rht_dgrad;
  c.pack_saved = f.pack_saved;
  c.until = f.until;
  c.seed = static_cast<uint64_t>(f.seed);
  c.bf16_blocks = f.bf16_layers.value().blocks;
  c.bf16_head = f.bf16_layers.value().head;
  if (model) c.n_blocks = static_cast<int>(model->blocks());
  return c;
}

}  // namespace

autograd::PrecisionPolicy precision_policy(const recipe::Recipe& r, nn::Model* model) {
  autograd::PrecisionPolicy p;
  p.matmul = policy_dtype("matmul_format", r.matmul_format);
  p.saved = saved_dtype(r.saved_format);
  p.cast_readout = r.cast_readout;
  if (dtype_size(p.saved) == 1) p.saved_hints = std::make_shared<autograd::SavedScaleHints>();
  if (r.cast_scaling == quant::CastScaling::propagate) {
    // Scale propagation starts from the parameters' own scales.
    if (model == nullptr)
      throw std::invalid_argument("recipe " + r.name + ": cast_scaling 'propagate' needs the model (its parameters' scales)");
    scalify::ScalifyOptions o;
    o.forward_format = optional_format(recipe::cast_target(r.cast_forward));
    o.backward_format = optional_format(recipe::cast_target(r.cast_backward));
    try {
      p.quantiser = scalify::make_scalify_quantiser(o, model->parameters());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("recipe " + r.name + ": " + e.what());
    }
    return p;
  }
  if (r.fp4.format.value().has_value()) {
    p.quantiser = std::make_shared<quant::Fp4Quantiser>(fp4_config(r.fp4, model));
    return p;
  }
  const formats::Format* fwd = recipe::cast_target(r.cast_forward);
  const formats::Format* bwd = recipe::cast_target(r.cast_backward);
  if (fwd != nullptr || bwd != nullptr) {
    quant::Fp8Config c;
    c.scaling = r.cast_scaling;
    c.forward_format = optional_format(fwd);
    c.backward_format = optional_format(bwd);
    c.amax_history = r.amax_history;
    c.margin = static_cast<int>(r.cast_margin);
    c.mx_scale_rounding = r.mx_scale_rounding;
    try {
      p.quantiser = std::make_shared<quant::Fp8Quantiser>(c);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("recipe " + r.name + ": " + e.what());
    }
  }
  return p;
}

int64_t count_targets(const nn::Batch& b) {
  if (b.targets.dtype() != DType::i32) throw std::invalid_argument("batch targets must be i32");
  const int32_t* t = b.targets.data<int32_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < b.targets.numel(); ++i) n += t[i] >= 0;
  return n;
}

Amp::Amp(nn::Model& model, optim::Optimizer& optimizer, const recipe::Recipe& recipe, AmpOptions options)
    : model_(model),
      optimizer_(optimizer),
      recipe_(recipe),
      options_(options),
      params_(model.parameters()),
      scaler_(recipe.loss_scale),
      master_(params_, recipe, options.seed),
      grad_format_(recipe.gradient_format.value()),
      stats_format_(diagnostic_format(recipe)),
      low_gradients_(!is_fp32(recipe.gradient_format.value())) {
  validate_recipe(recipe_);
  // The parametrisation (standard or unit) is the model's: it is built
  // with it (nn::GPTConfig / MLPConfig); Amp only handles precision.
  model_.set_precision(precision_policy(recipe_, &model_));
  master_.initialise();
  model_.zero_grad();
}

nn::LossSum Amp::backward(const nn::Batch& batch, int64_t total_targets) {
  if (total_targets <= 0) throw std::invalid_argument("a step needs at least one non-ignored target");
  // The scale is constant within a step; dividing by the step's total target
  // count makes accumulated micro-batches a sum, not a mean of means.
  const float grad_scale = static_cast<float>(scaler_.scale() / static_cast<double>(total_targets));
  return model_.forward_backward(batch, grad_scale);
}

void Amp::round_gradients() {
  // Accumulation across micro-batches is in fp32; the step's gradient is
  // then rounded into the gradient format once, before unscaling, so values
  // below its range flush to zero and values above overflow to inf (which
  // then skips the step), as 16-bit gradients would.
  formats::RoundOptions opt;
  for (size_t i = 0; i < params_.size(); ++i) {
    float* g = params_[i]->grad.f32() + (owned_.empty() ? 0 : owned_[i].begin);
    const int64_t n = owned_.empty() ? params_[i]->grad.numel() : owned_[i].size();
    formats::fake_quantize(grad_format_, g, g, static_cast<size_t>(n), opt);
  }
}

std::vector<float> Amp::step_gradient(const autograd::Parameter& p) const {
  std::vector<float> g(p.grad.f32(), p.grad.f32() + p.grad.numel());
  if (low_gradients_) formats::fake_quantize(grad_format_, g.data(), g.data(), g.size(), formats::RoundOptions{});
  const float unscale = scaler_.unscale_factor();  // as LossScaler::unscale_sumsq multiplies
  for (float& x : g) x *= unscale;
  return g;
}

void Amp::shard(const optim::OwnedRanges& owned, SumOfChunks total) {
  if (owned.size() != params_.size()) throw std::logic_error("Amp::shard: one range per parameter expected");
  if (options_.grad_stats)
    throw std::invalid_argument("--grad-stats measures the whole gradient, which a sharded step never holds");
  master_.shard(owned);
  owned_ = owned;
  total_ = std::move(total);
}

AmpStepResult Amp::step(double lr) {
  AmpStepResult r;
  r.loss_scale = scaler_.scale();
  if (options_.grad_stats) r.grad_stats_json = grad_stats_json(stats_format_, gradient_range_stats(stats_format_, params_));
  if (low_gradients_) round_gradients();
  // Finiteness, unscale and norm in one read of the gradients.
  const double sumsq = owned_.empty() ? scaler_.unscale_sumsq(params_)
                                      : total_(optim::scale_grads_chunk_sumsq(params_, scaler_.unscale_factor(), &owned_));
  if (!std::isfinite(sumsq)) {
    r.skipped = true;
    r.grad_norm = std::numeric_limits<double>::infinity();
  } else {
    r.grad_norm = std::sqrt(sumsq) / scaler_.scale();
    if (!std::isfinite(r.grad_norm)) r.skipped = true;  // overflow in the unscale itself
    else optim::clip_to_norm(params_, r.grad_norm, options_.grad_clip, owned());
  }
  if (!r.skipped) {
    master_.before_update();
    optimizer_.step(lr);
    master_.after_update(updates_);
    ++updates_;
  }
  scaler_.update(r.skipped);
  // Delayed FP8 scaling rolls its amax histories once per optimizer step
  // (skipped steps included: their finite amaxes are real observations).
  if (const auto& q = model_.precision().quantiser) q->end_step();
  model_.zero_grad();
  return r;
}

}  // namespace mantissa::amp
