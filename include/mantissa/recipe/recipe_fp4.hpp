// The FP4 ingredients of a recipe (NVFP4 and MXFP4 training recipes): which 4-bit block
// format the linear layers' products use and the fixes that make it train.
// Each is a recipe setting (`--set key=value`, the keys below).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mantissa::recipe {

struct Recipe;

struct Fp4Settings {
  std::string format = "none";   // fp4_format: none, nvfp4 (E4M3 scale / 16), mxfp4 (E8M0 scale / 32)
  bool forward = true;           // fp4_forward: the forward product's inputs (else bf16)
  bool backward = true;          // fp4_backward: both backward products' inputs (else bf16)
  bool weight_2d = true;         // fp4_weight_2d: square weight blocks (else 1-D along each contraction)
  std::string rht = "random";    // rht: none, random, deterministic (Hadamard on the Wgrad inputs)
  bool rht_dgrad = false;        // rht_dgrad: the Hadamard on the dgrad inputs too (Tseng et al.)
  std::string sr = "gradients";  // fp4_sr: none, gradients, backward (every backward-product input)
  std::string bf16_layers = "0,-1,head";  // bf16_layers: block indices (negative from the end), head; or none
  double until = 1.0;            // fp4_until: fraction of the run's steps in FP4, then bf16
  long long seed = 0;            // rht_seed: RHT signs and stochastic-rounding draws
  bool pack_saved = true;        // fp4_pack_saved: saved Wgrad operands as 4-bit codes (same values as bf16)
};

// Sets one fp4 key; false if `key` is not one (throws std::invalid_argument
// for a bad value, naming the key).
bool set_fp4_field(Fp4Settings& s, std::string_view key, std::string_view value);
// (key, value) of every setting, values as set_fp4_field reads them.
std::vector<std::pair<std::string, std::string>> fp4_fields(const Fp4Settings& s);
constexpr const char* kFp4Keys = "fp4_format, fp4_forward, fp4_backward, fp4_weight_2d, rht, rht_dgrad, fp4_sr, "
                                 "bf16_layers, fp4_until, rht_seed, fp4_pack_saved";
// One line for `mantissa recipes` ("-" when the format is none).
std::string fp4_summary(const Fp4Settings& s);

// nvfp4, nvfp4-naive, mxfp4, mxfp4-fwd, mxfp4-naive.
void add_fp4_recipes(std::vector<Recipe>& v);

}  // namespace mantissa::recipe
