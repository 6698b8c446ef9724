// Recipes: named presets of orthogonal precision settings. A recipe says, per
// role, which number format a tensor lives in or is computed in, how the loss
// is scaled, and how fp32 master weights map onto the working weights. The
// registry is open: later work adds unit-*, fp8-*, scalify-* recipes with
// register_recipe() without touching this file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mantissa/recipe/recipe_fp4.hpp"
#include "mantissa/recipe/setting.hpp"
#include "mantissa/formats/mx.hpp"
#include "mantissa/quant/cast_scaling.hpp"
#include "mantissa/tensor/tensor.hpp"

namespace mantissa::recipe {

// unit: unit scaling (Blake et al. 2023) with the library's rules; umup: u-muP
// (Blake et al. 2025) on top, i.e. non-parametric norms and depth-dependent
// residual taus (unit/config.hpp).
enum class Parametrisation : uint8_t { standard, unit, umup };
// Whether the model is unit-scaled (unit or umup): no loss scaling needed,
// the unit learning rate and no gradient clipping by default.
inline bool unit_scaled(Parametrisation p) { return p != Parametrisation::standard; }
enum class ScalingMethod : uint8_t { none, static_scale, dynamic };
enum class WeightRounding : uint8_t { nearest, stochastic };

const char* parametrisation_name(Parametrisation p);
const char* scaling_name(ScalingMethod s);
const char* weight_rounding_name(WeightRounding r);
const char* cast_scaling_name(quant::CastScaling s);

// Loss scaling (torch.cuda.amp.GradScaler semantics for dynamic).
struct LossScaleConfig {
  ScalingMethod method = ScalingMethod::none;
  double init_scale = 65536.0;  // dynamic: starting scale; static: the scale
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps before the scale grows
  double min_scale = 0.0;          // 0: no lower bound
  double max_scale = 0.0;          // 0: no upper bound (apex used 2^24)
};

struct Recipe {
  std::string name;
  std::string description;
  Parametrisation parametrisation = Parametrisation::standard;
  // Formats (preset names of the formats module: "fp32", "bf16", "fp16", ...),
  // parsed when set (setting.hpp).
  FormatSetting matmul_format = "fp32";    // inputs of matrix products (fp32 accumulation)
  FormatSetting saved_format = "fp32";     // activations saved for the backward pass
  FormatSetting gradient_format = "fp32";  // parameter gradients as accumulated
  FormatSetting weight_format = "fp32";    // working weights the model computes with
  // "fp32": the optimizer updates an fp32 master copy that is rounded into
  // weight_format after each step; "none": the 16-bit weights are updated
  // directly (apex O3), losing updates below half an ulp.
  FormatSetting master_format = "fp32";
  StateFormatSetting optimizer_state_format = "fp32";
  // With 16-bit weights, keep layer-norm gains and biases in fp32 (apex O2).
  bool norms_fp32 = false;
  WeightRounding weight_rounding = WeightRounding::nearest;
  LossScaleConfig loss_scale;
  // Casts at the matrix products: the forward inputs (activation and weight)
  // of every linear/matmul/bmm are cast to `cast_forward`, the output gradient
  // to `cast_backward` in the backward pass ("" = no cast, which `--set` also
  // takes as "none"; e.g. "e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz"; "fp16"
  // with propagate). The cast operands
  // are real 1-byte tensors multiplied exactly through the bf16 path (fp16
  // casts: real 2-byte tensors decoded exactly to f32 and multiplied in f32).
  FormatSetting cast_forward = "";
  FormatSetting cast_backward = "";
  quant::CastScaling cast_scaling = quant::CastScaling::unit;
  int64_t amax_history = 1024;  // delayed: steps of amax kept per tensor
  double cast_margin = 0.0;     // delayed/current: scale = 2^floor(log2(max/amax)) / 2^margin
  // mx: the block scale's exponent. floor (OCP) = floor(log2 amax) - emax, which
  // clips the largest values of a block to the element's max; ceil = the
  // smallest exponent with amax x 2^-E <= max, which never clips.
  formats::ScaleRounding mx_scale_rounding = formats::ScaleRounding::floor;
  // false: the readout (the LM head, the MLP's last layer) is not cast and
  // runs in matmul_format, as Megatron's first/last-layer rule and u-muP's
  // FP8 scheme keep it. Unscaled e5m2 flushes the logit gradients of
  // unlikely tokens (those below 2^-16), which the model needs to learn to
  // rule them out.
  bool cast_readout = true;
  // 4-bit block formats in the linear layers' products (FP4 recipes).
  Fp4Settings fp4;
};

// ---- registry ---------------------------------------------------------------
// Adds (or replaces, by name) a recipe. Thread-compatible: call at start-up.
void register_recipe(const Recipe& r);
// Every registered recipe, in registration order (the built-ins first).
std::vector<Recipe> recipes();
std::string recipe_names();  // "fp32, bf16-amp, ..." for messages
// Throws std::invalid_argument naming the valid recipes.
Recipe find_recipe(std::string_view name);

// apex opt levels (NVIDIA apex.amp): O0 fp32; O1 per-op casting of matrix
// products to fp16, fp32 weights, dynamic loss scale; O2 fp16 weights with
// fp32 master weights, norms kept fp32, dynamic loss scale; O3 fp16
// everything, no master weights, no loss scale. Throws on other names.
Recipe recipe_for_opt_level(std::string_view level);

// Every setting as `mantissa recipes --fields` lists it: its key (as --set
// takes it), the values it takes, its default (as --set writes it) and what it sets.
struct FieldInfo {
  std::string key, type, default_value, description;
};
std::vector<FieldInfo> recipe_fields();

// Overrides one setting by key (the keys of recipe_fields, e.g.
// "matmul_format", "weight_rounding", "loss_scale.init_scale"); throws
// std::invalid_argument naming the key or the bad value.
void set_recipe_field(Recipe& r, std::string_view key, std::string_view value);
// Checks formats exist and settings are consistent; throws naming the field.
void validate_recipe(const Recipe& r);

// One JSON object per recipe with every setting; recipe_from_json reads it back.
std::string recipe_to_json(const Recipe& r);
Recipe recipe_from_json(const std::string& json);

// Typed reads of format settings for the engine.
// Whether two formats hold the same values (every field but the name).
bool same_format(const formats::Format& a, const formats::Format& b);
// The tensor dtype whose values are exactly the format's (f32, bf16, f16 and
// the four 1-byte FP8 dtypes); nullopt for other formats.
std::optional<DType> exact_dtype(const formats::Format& f);
// A cast setting's format; nullptr for no cast.
const formats::Format* cast_target(const FormatSetting& cast);
// The master copy's format; nullptr when master_format is none.
const formats::Format* master_copy_format(const Recipe& r);

}  // namespace mantissa::recipe
