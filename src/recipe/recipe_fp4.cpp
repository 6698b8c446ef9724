// The FP4 recipes and their settings (recipe/recipe_fp4.hpp).
#include "mantissa/recipe/recipe_fp4.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "mantissa/recipe/recipe.hpp"
#include "recipe/names.hpp"

namespace mantissa::recipe {
namespace {

Recipe fp4_recipe(std::string name, std::string description) {
  Recipe r;
  r.name = std::move(name);
  r.description = std::move(description);
  r.matmul_format = r.saved_format = "bf16";
  return r;
}

}  // namespace

std::optional<formats::Fp4Scale> parse_fp4_format(std::string_view v) {
  switch (index_of("fp4_format", v, kFp4FormatNames)) {
    case 1: return formats::Fp4Scale::nvfp4;
    case 2: return formats::Fp4Scale::mxfp4;
    default: return std::nullopt;
  }
}

quant::RhtMode parse_rht(std::string_view v) {
  return static_cast<quant::RhtMode>(index_of("rht", v, kRhtNames));
}

Fp4Rounding parse_fp4_sr(std::string_view v) {
  return static_cast<Fp4Rounding>(index_of("fp4_sr", v, kFp4RoundingNames));
}

// "none" or a comma list of integers and "head".
Bf16Layers parse_bf16_layer_list(std::string_view v) {
  Bf16Layers out;
  if (v == "none" || v.empty()) return out;
  size_t start = 0;
  while (start <= v.size()) {
    const size_t end = std::min(v.find(',', start), v.size());
    const std::string item(v.substr(start, end - start));
    size_t used = 0;
    bool ok = item == "head";
    if (ok) out.head = true;
    else try {
        out.blocks.push_back(std::stoi(item, &used));
        ok = used == item.size() && !item.empty();
      } catch (const std::exception&) {
        ok = false;
      }
    if (!ok)
      throw std::invalid_argument("recipe setting bf16_layers: '" + item +
                                  "' is not a block index (negative counts from the end) or 'head'");
    start = end + 1;
  }
  return out;
}

std::string fp4_summary(const Fp4Settings& s) {
  if (!s.format.value().has_value()) return "-";
  std::string f = s.format.name() + (s.forward ? " fwd" : "") + (s.backward ? " bwd" : "");
  f += s.weight_2d ? ", 2-D weights" : ", 1-D weights";
  f += ", rht " + s.rht.name() + (s.rht_dgrad && s.rht.value() != quant::RhtMode::none ? " (wgrad+dgrad)" : "") + ", sr " + s.sr.name() +
       ", bf16 layers " + s.bf16_layers.name();
  if (s.until < 1) {
    char u[32];
    std::snprintf(u, sizeof u, ", bf16 after %g", s.until);
    f += u;
  }
  return f;
}

void add_fp4_recipes(std::vector<Recipe>& v) {
  Recipe nv = fp4_recipe("nvfp4",
                         "NVFP4 (E2M1, E4M3 scale per 16, fp32 tensor scale) in all three products of the block "
                         "linear layers: 16x16 weight blocks, random Hadamard on the Wgrad inputs, stochastic "
                         "rounding of gradients, first/last block and head in bf16 (NVIDIA)");
  nv.fp4.format = "nvfp4";
  v.push_back(nv);
  Recipe nvn = fp4_recipe("nvfp4-naive", "NVFP4 in every linear product, none of the fixes (RNE, 1-D blocks, no RHT, "
                                         "no bf16 layers)");
  nvn.fp4 = {.format = "nvfp4", .weight_2d = false, .rht = "none", .sr = "none", .bf16_layers = "none"};
  v.push_back(nvn);
  Recipe mx = fp4_recipe("mxfp4", "MXFP4 (E2M1, E8M0 scale per 32) in the backward products with stochastic "
                                  "rounding (blocks x 3/4) and random Hadamard on the inputs of both backward "
                                  "products, bf16 forward (Tseng et al.)");
  mx.fp4 = {.format = "mxfp4", .forward = false, .weight_2d = false, .rht_dgrad = true, .sr = "backward",
            .bf16_layers = "none"};
  v.push_back(mx);
  Recipe mxf = mx;
  mxf.name = "mxfp4-fwd";
  mxf.description = "mxfp4 with the forward products in MXFP4 too (round to nearest even)";
  mxf.fp4.forward = true;
  v.push_back(mxf);
  Recipe mxn = fp4_recipe("mxfp4-naive", "MXFP4 in every linear product, none of the fixes (RNE, OCP scales, no RHT, "
                                         "no bf16 layers)");
  mxn.fp4 = {.format = "mxfp4", .weight_2d = false, .rht = "none", .sr = "none", .bf16_layers = "none"};
  v.push_back(mxn);
}

}  // namespace mantissa::recipe
