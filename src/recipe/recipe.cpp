// The recipe registry and the built-in recipes. Settings are
// orthogonal: a recipe is data, and every consumer (trainer, model policy,
// master weights, loss scaler) reads only the fields it cares about.
#include "mantissa/recipe/recipe.hpp"

#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mantissa/formats/format.hpp"
#include "mantissa/formats/parse_number.hpp"
#include "mantissa/io/untrusted.hpp"
#include "recipe/plain_values.hpp"

namespace mantissa::recipe {
namespace {

using nlohmann::json;

Recipe make(std::string name, std::string description) {
  Recipe r;
  r.name = std::move(name);
  r.description = std::move(description);
  return r;
}

// Mixed precision as torch autocast / apex O1: fp32 weights, low-precision
// matrix products, 16-bit saved activations.
Recipe amp_recipe(std::string name, const std::string& low, ScalingMethod scaling, std::string description) {
  Recipe r = make(std::move(name), std::move(description));
  r.matmul_format = low;
  r.saved_format = low;
  r.loss_scale.method = scaling;
  return r;
}

// Everything 16 bit, no master copy (apex O3).
Recipe pure_recipe(std::string name, const std::string& low, std::string description) {
  Recipe r = make(std::move(name), std::move(description));
  r.matmul_format = r.saved_format = r.gradient_format = r.weight_format = low;
  r.master_format = "none";
  return r;
}

// FP8 casts at every matrix product on top of bf16 mixed precision: the
// products run on the exact bf16 path, everything else as in bf16-amp except
// the activations kept for backward, which stay in 1 byte:
// the products keep their operands' codes, the other ops (layer norm, GELU,
// attention) e4m3fn copies with a per-tensor scale (COAT and DeepSeek-V3
// also cache non-linear inputs in FP8).
Recipe fp8_recipe(std::string name, quant::CastScaling scaling, const char* bwd, std::string description) {
  Recipe r = amp_recipe(std::move(name), "bf16", ScalingMethod::none, std::move(description));
  r.saved_format = "e4m3fn";
  r.cast_forward = "e4m3fn";
  r.cast_backward = bwd;
  r.cast_scaling = scaling;
  return r;
}

// Unit scaling: the unit-scaled model keeps tensors near scale 1,
// so no loss scaling anywhere.
void add_unit_recipes(std::vector<Recipe>& v) {
  Recipe u32 = make("unit-fp32", "unit-scaled model in fp32");
  u32.parametrisation = Parametrisation::unit;
  v.push_back(u32);
  Recipe ubf = amp_recipe("unit-bf16", "bf16", ScalingMethod::none,
                          "unit-scaled model, bf16 matrix products and saved activations, fp32 weights");
  ubf.parametrisation = Parametrisation::unit;
  v.push_back(ubf);
  Recipe u16 = pure_recipe("unit-fp16", "fp16",
                           "unit-scaled model, fp16 matrix products, activations, weights and gradients, fp32 master "
                           "weights, no loss scaling");
  u16.parametrisation = Parametrisation::unit;
  u16.master_format = "fp32";
  v.push_back(u16);
  Recipe u8 = fp8_recipe("unit-fp8", quant::CastScaling::unit, "e5m2",
                         "unit-scaled model, e4m3fn matrix-product inputs forward, e5m2 output gradients backward, "
                         "scale 1, no loss scaling");
  u8.parametrisation = Parametrisation::unit;
  u8.saved_format = "bf16";  // the unit ops save through Tape::save (16-bit), not save_compact
  // The readout stays uncast, as u-muP's FP8 scheme keeps it (Recipe::cast_readout).
  u8.cast_readout = false;
  v.push_back(u8);
  // u-muP: the same formats as unit-fp32 / unit-fp8 on the u-muP model.
  Recipe m32 = u32;
  m32.name = "umup-fp32";
  m32.description = "u-muP model (non-parametric norms, depth-dependent residual taus) in fp32";
  m32.parametrisation = Parametrisation::umup;
  v.push_back(m32);
  Recipe m8 = u8;
  m8.name = "umup-fp8";
  m8.description = "u-muP model with unit-fp8's casts: e4m3fn matrix-product inputs forward, e5m2 output gradients "
                   "backward, scale 1, bf16 readout, no loss scaling";
  m8.parametrisation = Parametrisation::umup;
  v.push_back(m8);
}

// Production FP8 and the unscaled baseline.
void add_fp8_recipes(std::vector<Recipe>& v) {
  v.push_back(fp8_recipe("fp8-noscale", quant::CastScaling::unit, "e5m2",
                         "standard model with unit-fp8's casts (e4m3fn forward, e5m2 backward, scale 1): what unit "
                         "scaling fixes"));
  v.back().cast_readout = false;  // the same casts as unit-fp8
  v.push_back(fp8_recipe("fp8-current", quant::CastScaling::current, "e5m2",
                         "e4m3fn forward / e5m2 backward, per-tensor power-of-two scale from this step's amax"));
  v.push_back(fp8_recipe("fp8-delayed", quant::CastScaling::delayed, "e5m2",
                         "e4m3fn forward / e5m2 backward, per-tensor scale from the max of a 1024-step amax history, "
                         "margin 0 (Transformer Engine DelayedScaling)"));
  v.push_back(fp8_recipe("mxfp8", quant::CastScaling::mx, "e5m2",
                         "MXFP8: 32-element blocks along the contraction dim with E8M0 scales rounded up (no block "
                         "clips), e4m3fn forward / e5m2 backward"));
  // OCP's floor exponent clips every block whose amax mantissa exceeds the
  // element max's (1.75); ceil never clips, so no block loses its largest
  // values. mx_scale_rounding=floor gives OCP's rule.
  v.back().mx_scale_rounding = formats::ScaleRounding::ceil;
  v.push_back(fp8_recipe("fp8-blockwise", quant::CastScaling::blockwise, "e4m3fn",
                         "e4m3fn everywhere, 1x128 activation tiles and 128x128 weight blocks with power-of-two "
                         "scales (DeepSeek-V3)"));
}

// Scale propagation: scales travel with
// the tensors, so the casts need no loss scaling.
void add_scalify_recipes(std::vector<Recipe>& v) {
  auto scalify = [](std::string name, const char* fwd, const char* bwd, std::string description) {
    Recipe r = make(std::move(name), std::move(description));
    r.matmul_format = r.saved_format = r.gradient_format = "fp16";
    r.cast_forward = fwd;
    r.cast_backward = bwd;
    r.cast_scaling = quant::CastScaling::propagate;
    return r;
  };
  // FP16 casts are real 2-byte tensors decoded exactly to f32 for the product
  // (fp16 has more significant bits than bf16); parameter gradients are kept
  // in fp16 like scalify-fp8's, the weights in fp32 (the master weights).
  Recipe f16 = scalify("scalify-fp16", "fp16", "fp16",
                       "scale propagation: fp16 matrix products and gradients at propagated scales, fp32 master "
                       "weights");
  v.push_back(f16);
  // The LayerNorm-backward dynamic rescale is part of the propagate
  // quantiser (the residual gradient entering attn/mlp.c_proj backward).
  Recipe f16m = f16;
  f16m.name = "scalify-fp16-master";
  f16m.description =
      "scalify-fp16 with fp16 master weights (updated in place), dynamic rescale on the LayerNorm backward";
  f16m.weight_format = f16m.master_format = "fp16";
  v.push_back(f16m);
  Recipe f8 = scalify("scalify-fp8", "e4m3fn", "e5m2",
                      "scale propagation: e4m3fn matrix products, e5m2 gradients, fp16 master weights");
  f8.weight_format = f8.master_format = "fp16";
  f8.saved_format = "e4m3fn";  // as fp8_recipe's
  v.push_back(f8);
  Recipe f8s = f8;
  f8s.name = "scalify-fp8-fp16state";
  f8s.description = "scalify-fp8 with fp16 Adam moments, each rescaled to a per-tensor power-of-two scale every step";
  f8s.optimizer_state_format = "fp16";
  v.push_back(f8s);
}

std::vector<Recipe> builtin_recipes() {
  std::vector<Recipe> v;
  v.push_back(make("fp32", "everything in fp32 (apex O0)"));
  v.push_back(amp_recipe("bf16-amp", "bf16", ScalingMethod::none,
                         "bf16 matrix products (AMX, fp32 accumulation) and saved activations, fp32 weights; "
                         "bf16 has fp32's range so no loss scaling"));
  v.push_back(amp_recipe("fp16-amp", "fp16", ScalingMethod::dynamic,
                         "fp16 matrix products and saved activations, fp32 weights, dynamic loss scaling (apex O1)"));
  v.push_back(amp_recipe("fp16-amp-noscale", "fp16", ScalingMethod::none,
                         "fp16-amp without loss scaling: small gradients underflow in fp16"));
  v.push_back(pure_recipe("fp16-pure", "fp16",
                          "fp16 weights, gradients and activations, no master weights, no loss scaling (apex O3)"));
  v.push_back(pure_recipe("bf16-pure", "bf16",
                          "bf16 weights, gradients and activations, no master weights (updates below half a bf16 ulp are lost)"));
  Recipe o2 = pure_recipe("fp16-master", "fp16",
                          "fp16 weights and gradients with fp32 master weights, norms in fp32, dynamic loss scaling (apex O2)");
  o2.master_format = "fp32";
  o2.norms_fp32 = true;
  o2.loss_scale.method = ScalingMethod::dynamic;
  v.push_back(o2);
  Recipe llmc = pure_recipe("bf16-master-sr", "bf16",
                            "bf16 weights with fp32 master weights rounded stochastically each step (llm.c)");
  llmc.master_format = "fp32";
  llmc.weight_rounding = WeightRounding::stochastic;
  v.push_back(llmc);
  add_unit_recipes(v);
  add_fp8_recipes(v);
  add_scalify_recipes(v);
  add_fp4_recipes(v);
  return v;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<Recipe>& registry() {
  static std::vector<Recipe> r = builtin_recipes();
  return r;
}

template <class E, size_t N>
E parse_enum(std::string_view value, const char* (&names)[N], std::string_view what) {
  for (size_t i = 0; i < N; ++i)
    if (value == names[i]) return static_cast<E>(i);
  std::string valid;
  for (size_t i = 0; i < N; ++i) valid += (i ? ", " : "") + std::string(names[i]);
  throw std::invalid_argument("invalid " + std::string(what) + " '" + std::string(value) + "' (valid: " + valid + ")");
}

const char* kParamNames[] = {"standard", "unit", "umup"};
const char* kScalingNames[] = {"none", "static", "dynamic"};
const char* kRoundingNames[] = {"nearest", "stochastic"};
const char* kCastScalingNames[] = {"unit", "current", "delayed", "mx", "blockwise", "propagate"};
const char* kMxScaleNames[] = {"floor", "ceil"};  // formats::ScaleRounding order

// A format setting's parse error, named by the recipe field.
template <class S>
void check_setting(const std::string& field, const S& setting) {
  if (!setting.error().empty()) throw std::invalid_argument("recipe setting " + field + ": " + setting.error());
}

void check_format(const std::string& field, const FormatSetting& format, bool allow_none) {
  if (allow_none && format == "none") return;
  check_setting(field, format);
}

constexpr int64_t kMaxAmaxHistory = 1 << 20;

// A cast target: "" (no cast) or a format whose every value is exact in bf16
// (<= 8 exponent bits, <= 7 mantissa bits, 1 byte), so the cast operand can
// be multiplied exactly through the bf16 matrix path. Scale propagation may
// also cast to 16-bit formats (fp16, bf16): its quantiser decides.
void check_cast_format(const std::string& field, const FormatSetting& cast, quant::CastScaling scaling) {
  if (cast.empty()) return;
  check_format(field, cast, false);
  const formats::Format& f = cast.value();
  if (scaling == quant::CastScaling::propagate) return;
  if (f.kind != formats::Kind::floating || f.storage_bytes() != 1 || f.exponent_bits > 8 || f.mantissa_bits > 7)
    throw std::invalid_argument("recipe setting " + field + ": '" + cast.name() +
                                "' is not a 1-byte floating format exact in bf16 (e.g. e4m3fn, e4m3fnuz, e5m2, "
                                "e5m2fnuz); 16-bit casts need cast_scaling = propagate");
  // Scaled formats: the scale exponent can place any value of the format's
  // range, so only the element format matters here.
}

}  // namespace

double parse_number(std::string_view key, std::string_view value) {
  double d = 0;
  if (!formats::parse_finite(value, d))
    throw std::invalid_argument("recipe setting " + std::string(key) + ": '" + io::excerpt(value) + "' is not a number");
  return d;
}

bool parse_bool(std::string_view key, std::string_view value) {
  if (value == "true") return true;
  if (value == "false") return false;
  throw std::invalid_argument("recipe setting " + std::string(key) + ": '" + std::string(value) + "' is not true/false");
}

const char* parametrisation_name(Parametrisation p) { return kParamNames[static_cast<int>(p)]; }
const char* scaling_name(ScalingMethod s) { return kScalingNames[static_cast<int>(s)]; }
const char* weight_rounding_name(WeightRounding r) { return kRoundingNames[static_cast<int>(r)]; }
const char* cast_scaling_name(quant::CastScaling s) { return kCastScalingNames[static_cast<int>(s)]; }

void register_recipe(const Recipe& r) {
  validate_recipe(r);
  std::lock_guard lock(registry_mutex());
  for (auto& existing : registry())
    if (existing.name == r.name) {
      existing = r;
      return;
    }
  registry().push_back(r);
}

std::vector<Recipe> recipes() {
  std::lock_guard lock(registry_mutex());
  return registry();
}

std::string recipe_names() {
  std::string s;
  for (const auto& r : recipes()) s += (s.empty() ? "" : ", ") + r.name;
  return s;
}

Recipe find_recipe(std::string_view name) {
  for (const auto& r : recipes())
    if (r.name == name) return r;
  throw std::invalid_argument("unknown recipe '" + std::string(name) + "' (valid: " + recipe_names() + ")");
}

Recipe recipe_for_opt_level(std::string_view level) {
  if (level == "O0") return find_recipe("fp32");
  if (level == "O1") return find_recipe("fp16-amp");
  if (level == "O2") return find_recipe("fp16-master");
  if (level == "O3") return find_recipe("fp16-pure");
  throw std::invalid_argument("unknown opt level '" + std::string(level) + "' (valid: O0, O1, O2, O3)");
}

void validate_recipe(const Recipe& r) {
  if (r.name.empty()) throw std::invalid_argument("recipe has no name");
  check_format("matmul_format", r.matmul_format, false);
  check_format("saved_format", r.saved_format, false);
  check_format("gradient_format", r.gradient_format, false);
  check_format("weight_format", r.weight_format, false);
  check_format("master_format", r.master_format, true);
  check_setting("optimizer_state_format", r.optimizer_state_format);
  check_cast_format("cast_forward", r.cast_forward, r.cast_scaling);
  check_cast_format("cast_backward", r.cast_backward, r.cast_scaling);
  if (r.amax_history < 1 || r.amax_history > kMaxAmaxHistory)
    throw std::invalid_argument("recipe " + r.name + ": amax_history must be in [1, " +
                                std::to_string(kMaxAmaxHistory) + "]");
  if (!std::isfinite(r.cast_margin) || r.cast_margin < 0 || r.cast_margin > 64 ||
      r.cast_margin != std::floor(r.cast_margin))
    throw std::invalid_argument("recipe " + r.name + ": cast_margin must be an integer in [0, 64]");
  if (r.cast_scaling != quant::CastScaling::unit && r.cast_scaling != quant::CastScaling::propagate && r.cast_forward.empty() &&
      r.cast_backward.empty())
    throw std::invalid_argument("recipe " + r.name + ": cast_scaling '" + cast_scaling_name(r.cast_scaling) +
                                "' needs cast_forward or cast_backward");
  check_fp4_settings(r.fp4);
  if (r.fp4.format != "none" && (!r.cast_forward.empty() || !r.cast_backward.empty()))
    throw std::invalid_argument("recipe " + r.name + ": fp4_format and cast_forward/cast_backward exclude each other");
  const auto& ls = r.loss_scale;
  if (!(ls.init_scale > 0) || !std::isfinite(ls.init_scale))
    throw std::invalid_argument("recipe " + r.name + ": loss_scale.init_scale must be positive");
  if (!(ls.growth_factor >= 1)) throw std::invalid_argument("recipe " + r.name + ": loss_scale.growth_factor must be >= 1");
  if (!(ls.backoff_factor > 0 && ls.backoff_factor <= 1))
    throw std::invalid_argument("recipe " + r.name + ": loss_scale.backoff_factor must be in (0, 1]");
  if (ls.growth_interval < 1) throw std::invalid_argument("recipe " + r.name + ": loss_scale.growth_interval must be >= 1");
  if (ls.min_scale < 0 || ls.max_scale < 0 || (ls.max_scale > 0 && ls.max_scale < ls.min_scale))
    throw std::invalid_argument("recipe " + r.name + ": loss_scale.min_scale/max_scale out of order");
}

void set_recipe_field(Recipe& r, std::string_view key, std::string_view value) {
  io::require_utf8(key, "recipe setting name");
  io::require_utf8(value, "recipe setting '" + std::string(key) + "'");
  const std::string v(value);
  auto& ls = r.loss_scale;
  if (key == "name") r.name = v;
  else if (key == "description") r.description = v;
  else if (key == "parametrisation") r.parametrisation = parse_enum<Parametrisation>(value, kParamNames, key);
  else if (key == "matmul_format") check_format(std::string(key), r.matmul_format = v, false);
  else if (key == "saved_format") check_format(std::string(key), r.saved_format = v, false);
  else if (key == "gradient_format") check_format(std::string(key), r.gradient_format = v, false);
  else if (key == "weight_format") check_format(std::string(key), r.weight_format = v, false);
  else if (key == "master_format") check_format(std::string(key), r.master_format = v, true);
  else if (key == "optimizer_state_format") check_setting(std::string(key), r.optimizer_state_format = v);
  else if (key == "norms_fp32") r.norms_fp32 = parse_bool(key, value);
  else if (key == "cast_readout") r.cast_readout = parse_bool(key, value);
  else if (key == "weight_rounding") r.weight_rounding = parse_enum<WeightRounding>(value, kRoundingNames, key);
  else if (key == "loss_scale.method") ls.method = parse_enum<ScalingMethod>(value, kScalingNames, key);
  else if (key == "loss_scale.init_scale") ls.init_scale = parse_number(key, value);
  else if (key == "loss_scale.growth_factor") ls.growth_factor = parse_number(key, value);
  else if (key == "loss_scale.backoff_factor") ls.backoff_factor = parse_number(key, value);
  else if (key == "loss_scale.growth_interval") {
    const double d = parse_number(key, value);
    if (d != std::floor(d) || d < 1 || d > 1e15)
      throw std::invalid_argument("recipe setting loss_scale.growth_interval: '" + v + "' is not a positive integer");
    ls.growth_interval = static_cast<int64_t>(d);
  } else if (key == "cast_forward" || key == "cast_backward") {
    // "none" is the empty cast, spelled as fp4_format spells its absence.
    const FormatSetting cast = v == "none" ? std::string() : v;
    check_cast_format(std::string(key), cast, quant::CastScaling::propagate);
    (key == "cast_forward" ? r.cast_forward : r.cast_backward) = cast;
  } else if (key == "cast_scaling") r.cast_scaling = parse_enum<quant::CastScaling>(value, kCastScalingNames, key);
  else if (key == "amax_history") {
    const double d = parse_number(key, value);
    if (d != std::floor(d) || d < 1 || d > static_cast<double>(kMaxAmaxHistory))
      throw std::invalid_argument("recipe setting amax_history: '" + v + "' is not an integer in [1, " +
                                  std::to_string(kMaxAmaxHistory) + "]");
    r.amax_history = static_cast<int64_t>(d);
  } else if (key == "cast_margin") {
    const double d = parse_number(key, value);
    if (d != std::floor(d) || d < 0 || d > 64)
      throw std::invalid_argument("recipe setting cast_margin: '" + v + "' is not an integer in [0, 64]");
    r.cast_margin = d;
  } else if (key == "mx_scale_rounding") {
    r.mx_scale_rounding = parse_enum<formats::ScaleRounding>(value, kMxScaleNames, key);
  } else if (key == "loss_scale.min_scale") ls.min_scale = parse_number(key, value);
  else if (key == "loss_scale.max_scale") ls.max_scale = parse_number(key, value);
  else if (set_fp4_field(r.fp4, key, value)) return;
  else
    throw std::invalid_argument(
        "unknown recipe setting '" + std::string(key) +
        "' (valid: parametrisation, matmul_format, saved_format, gradient_format, weight_format, master_format, "
        "optimizer_state_format, norms_fp32, weight_rounding, cast_forward, cast_backward, cast_scaling, "
        "amax_history, cast_margin, mx_scale_rounding, cast_readout, loss_scale.method, loss_scale.init_scale, "
        "loss_scale.growth_factor, loss_scale.backoff_factor, loss_scale.growth_interval, loss_scale.min_scale, "
        "loss_scale.max_scale, " + kFp4Keys + ")");
}

std::string recipe_to_json(const Recipe& r) {
  const auto& ls = r.loss_scale;
  json j = {{"name", r.name},
            {"description", r.description},
            {"parametrisation", parametrisation_name(r.parametrisation)},
            {"matmul_format", r.matmul_format.name()},
            {"saved_format", r.saved_format.name()},
            {"gradient_format", r.gradient_format.name()},
            {"weight_format", r.weight_format.name()},
            {"master_format", r.master_format.name()},
            {"optimizer_state_format", r.optimizer_state_format.name()},
            {"norms_fp32", r.norms_fp32},
            {"weight_rounding", weight_rounding_name(r.weight_rounding)},
            {"cast_forward", r.cast_forward.name()},
            {"cast_backward", r.cast_backward.name()},
            {"cast_scaling", cast_scaling_name(r.cast_scaling)},
            {"amax_history", r.amax_history},
            {"cast_margin", r.cast_margin},
            {"mx_scale_rounding", kMxScaleNames[static_cast<int>(r.mx_scale_rounding)]},
            {"cast_readout", r.cast_readout},
            {"loss_scale",
             {{"method", scaling_name(ls.method)},
              {"init_scale", ls.init_scale},
              {"growth_factor", ls.growth_factor},
              {"backoff_factor", ls.backoff_factor},
              {"growth_interval", ls.growth_interval},
              {"min_scale", ls.min_scale},
              {"max_scale", ls.max_scale}}}};
  for (const auto& [k, v] : fp4_fields(r.fp4)) j[k] = v;
  return j.dump();
}

Recipe recipe_from_json(const std::string& text) {
  const json j = io::parse_json(text, "recipe JSON");
  if (!j.is_object()) throw std::invalid_argument("recipe JSON is not an object");
  Recipe r;
  auto as_text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  for (auto& [key, value] : j.items()) {
    if (key == "loss_scale") {
      if (!value.is_object()) throw std::invalid_argument("recipe JSON: loss_scale is not an object");
      for (auto& [k2, v2] : value.items()) set_recipe_field(r, "loss_scale." + k2, as_text(v2));
    } else {
      set_recipe_field(r, key, as_text(value));
    }
  }
  validate_recipe(r);
  return r;
}

}  // namespace mantissa::recipe
