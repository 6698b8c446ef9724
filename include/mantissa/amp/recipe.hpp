// Recipes: named presets of orthogonal precision settings. A recipe says, per
// role, which number format a tensor lives in or is computed in, how the loss
// is scaled, and how fp32 master weights map onto the working weights. The
// registry is open: later work adds unit-*, fp8-*, scalify-* recipes with
// register_recipe() without touching this file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mantissa::amp {

enum class Parametrisation : uint8_t { standard, unit };
enum class ScalingMethod : uint8_t { none, static_scale, dynamic };
enum class WeightRounding : uint8_t { nearest, stochastic };

const char* parametrisation_name(Parametrisation p);
const char* scaling_name(ScalingMethod s);
const char* weight_rounding_name(WeightRounding r);

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
  // Formats (preset names of the formats module: "fp32", "bf16", "fp16", ...).
  std::string matmul_format = "fp32";    // inputs of matrix products (fp32 accumulation)
  std::string saved_format = "fp32";     // activations saved for the backward pass
  std::string gradient_format = "fp32";  // parameter gradients as accumulated
  std::string weight_format = "fp32";    // working weights the model computes with
  // "fp32": the optimizer updates an fp32 master copy that is rounded into
  // weight_format after each step; "none": the 16-bit weights are updated
  // directly (apex O3), losing updates below half an ulp.
  std::string master_format = "fp32";
  std::string optimizer_state_format = "fp32";
  // With 16-bit weights, keep layer-norm gains and biases in fp32 (apex O2).
  bool norms_fp32 = false;
  WeightRounding weight_rounding = WeightRounding::nearest;
  LossScaleConfig loss_scale;
};

// ---- registry ---------------------------------------------------------------
// Adds (or replaces, by name) a recipe. Thread-compatible: call at start-up.
void register_recipe(const Recipe& r);
// Every registered recipe, in registration order (the built-ins first).
std::vector<Recipe> recipes();
std::string recipe_names();  // "fp32, bf16-amp, ..." for messages
// Throws std::invalid_argument naming the valid recipes.
Recipe find_recipe(std::string_view name);

// apex opt levels (BRIEF section 2): O0 fp32; O1 per-op casting of matrix
// products to fp16, fp32 weights, dynamic loss scale; O2 fp16 weights with
// fp32 master weights, norms kept fp32, dynamic loss scale; O3 fp16
// everything, no master weights, no loss scale. Throws on other names.
Recipe recipe_for_opt_level(std::string_view level);

// Overrides one setting by key (the keys of recipe_to_json, e.g.
// "matmul_format", "weight_rounding", "loss_scale.init_scale"); throws
// std::invalid_argument naming the key or the bad value.
void set_recipe_field(Recipe& r, std::string_view key, std::string_view value);
// Checks formats exist and settings are consistent; throws naming the field.
void validate_recipe(const Recipe& r);

// One JSON object per recipe with every setting; recipe_from_json reads it back.
std::string recipe_to_json(const Recipe& r);
Recipe recipe_from_json(const std::string& json);

// True if the parameter named `name` is a normalisation gain or bias
// (kept fp32 when Recipe::norms_fp32).
bool is_norm_parameter(std::string_view name);

}  // namespace mantissa::amp
