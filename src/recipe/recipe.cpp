// The recipe registry and the built-in recipes. Settings are
// orthogonal: a recipe is data, and every consumer (trainer, model policy,
// master weights, loss scaler) reads only the fields it cares about.
#include "mantissa/recipe/recipe.hpp"

#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mantissa/formats/format.hpp"
#include "mantissa/tensor/tensor.hpp"
#include "mantissa/formats/parse_number.hpp"
#include "mantissa/io/untrusted.hpp"
#include "recipe/fields.hpp"
#include "recipe/names.hpp"
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

const char* parametrisation_name(Parametrisation p) { return kParametrisationNames[static_cast<int>(p)]; }
const char* scaling_name(ScalingMethod s) { return kLossScalingNames[static_cast<int>(s)]; }
const char* weight_rounding_name(WeightRounding r) { return kWeightRoundingNames[static_cast<int>(r)]; }
const char* cast_scaling_name(quant::CastScaling s) { return kCastScalingNames[static_cast<int>(s)]; }

bool same_format(const formats::Format& a, const formats::Format& b) {
  return a.kind == b.kind && a.exponent_bits == b.exponent_bits && a.mantissa_bits == b.mantissa_bits &&
         a.bias == b.bias && a.has_inf == b.has_inf && a.nan == b.nan && a.negative_zero == b.negative_zero &&
         a.subnormals == b.subnormals && a.is_signed == b.is_signed;
}

std::optional<DType> exact_dtype(const formats::Format& f) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::e4m3fn, DType::e5m2, DType::e4m3fnuz, DType::e5m2fnuz})
    if (same_format(f, formats::preset(dtype_format_name(t)))) return t;
  return std::nullopt;
}

const formats::Format* cast_target(const FormatSetting& cast) { return cast.empty() ? nullptr : &cast.value(); }

const formats::Format* master_copy_format(const Recipe& r) {
  return r.master_format == "none" ? nullptr : &r.master_format.value();
}

std::vector<FieldInfo> recipe_fields() {
  const Recipe defaults;
  std::vector<FieldInfo> out;
  for (const Field& f : fields())
    if (f.setting) out.push_back({f.key, f.type, field_text(f.write(defaults)), f.description});
  return out;
}

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
  for (const Field& f : fields())
    if (f.check) f.check(r);
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
  if (r.fp4.format.value().has_value() && (!r.cast_forward.empty() || !r.cast_backward.empty()))
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
  std::string valid;
  for (const Field& f : fields()) {
    if (f.key == key) return f.set(r, value);
    if (f.setting) valid += (valid.empty() ? "" : ", ") + f.key;
  }
  throw std::invalid_argument("unknown recipe setting '" + std::string(key) + "' (valid: " + valid + ")");
}

std::string recipe_to_json(const Recipe& r) {
  json j = json::object();
  for (const Field& f : fields()) {
    const size_t dot = f.key.find('.');
    if (dot == std::string::npos) j[f.key] = f.write(r);
    else j[f.key.substr(0, dot)][f.key.substr(dot + 1)] = f.write(r);
  }
  return j.dump();
}

namespace {
// A key of a nested group of fields ("loss_scale" for loss_scale.*).
bool is_group(const std::string& key) {
  for (const Field& f : fields())
    if (f.key.size() > key.size() && f.key.starts_with(key) && f.key[key.size()] == '.') return true;
  return false;
}
}  // namespace

Recipe recipe_from_json(const std::string& text) {
  const json j = io::parse_json(text, "recipe JSON");
  if (!j.is_object()) throw std::invalid_argument("recipe JSON is not an object");
  Recipe r;
  for (auto& [key, value] : j.items()) {
    if (is_group(key)) {
      if (!value.is_object()) throw std::invalid_argument("recipe JSON: " + key + " is not an object");
      for (auto& [k2, v2] : value.items()) set_recipe_field(r, key + "." + k2, field_text(v2));
    } else {
      set_recipe_field(r, key, field_text(value));
    }
  }
  validate_recipe(r);
  return r;
}

}  // namespace mantissa::recipe
