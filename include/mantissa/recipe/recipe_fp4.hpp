// The FP4 ingredients of a recipe (NVFP4 and MXFP4 training recipes): which 4-bit block
// format the linear layers' products use and the fixes that make it train.
// Each is a recipe setting (`--set key=value`, the keys below; src/recipe/fields.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mantissa/recipe/setting.hpp"
#include "mantissa/formats/fp4.hpp"
#include "mantissa/quant/fp4.hpp"

namespace mantissa::recipe {

struct Recipe;

// The typed values of the FP4 settings; each parser throws
// std::invalid_argument naming its key.
// fp4_format: "none" (nullopt: no FP4 products), "nvfp4" or "mxfp4".
std::optional<formats::Fp4Scale> parse_fp4_format(std::string_view v);
// rht: "none", "random" or "deterministic".
quant::RhtMode parse_rht(std::string_view v);
// fp4_sr: which inputs round stochastically.
enum class Fp4Rounding : uint8_t {
  none,       // none: nearest even everywhere
  gradients,  // the output gradients
  backward,   // every backward-product input (gradients, weights, activations)
};
Fp4Rounding parse_fp4_sr(std::string_view v);
// bf16_layers: "none" (or empty) or a comma list of block indices (negative
// from the end) and "head".
struct Bf16Layers {
  std::vector<int> blocks;
  bool head = false;
};
Bf16Layers parse_bf16_layer_list(std::string_view v);

using Fp4FormatSetting = Setting<std::optional<formats::Fp4Scale>, parse_fp4_format>;
using RhtSetting = Setting<quant::RhtMode, parse_rht>;
using Fp4RoundingSetting = Setting<Fp4Rounding, parse_fp4_sr>;
using Bf16LayersSetting = Setting<Bf16Layers, parse_bf16_layer_list>;

struct Fp4Settings {
  Fp4FormatSetting format = "none";        // fp4_format: none, nvfp4 (E4M3 scale / 16), mxfp4 (E8M0 scale / 32)
  bool forward = true;                     // fp4_forward: the forward product's inputs (else bf16)
  bool backward = true;                    // fp4_backward: both backward products' inputs (else bf16)
  bool weight_2d = true;                   // fp4_weight_2d: square weight blocks (else 1-D along each contraction)
  RhtSetting rht = "random";               // rht: none, random, deterministic (Hadamard on the Wgrad inputs)
  bool rht_dgrad = false;                  // rht_dgrad: the Hadamard on the dgrad inputs too (Tseng et al.)
  Fp4RoundingSetting sr = "gradients";     // fp4_sr: none, gradients, backward (every backward-product input)
  Bf16LayersSetting bf16_layers = "0,-1,head";  // bf16_layers: block indices (negative from the end), head; or none
  double until = 1.0;                      // fp4_until: fraction of the run's steps in FP4, then bf16
  long long seed = 0;                      // rht_seed: RHT signs and stochastic-rounding draws
  bool pack_saved = true;                  // fp4_pack_saved: saved Wgrad operands as 4-bit codes (same values as bf16)
};

// One line for `mantissa recipes` ("-" when the format is none).
std::string fp4_summary(const Fp4Settings& s);
// nvfp4, nvfp4-naive, mxfp4, mxfp4-fwd, mxfp4-naive.
void add_fp4_recipes(std::vector<Recipe>& v);

}  // namespace mantissa::recipe
