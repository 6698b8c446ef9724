// mantissa._core: recipes as the engine holds them. `Recipe` is the typed
// recipe::Recipe after --set overrides and validation (src/recipe/fields.cpp
// parses every setting once, here as for `mantissa train`); its properties
// read the typed values, so Python never parses a setting again. The enums
// are the engine's. recipes() / recipe() give the JSON form (every key --set takes).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "mantissa/autograd/policy.hpp"
#include "mantissa/recipe/recipe.hpp"
#include "recipe.hpp"

namespace mantissa::py {

recipe::Recipe resolved_recipe(const std::string& name, const std::vector<std::string>& set) {
  recipe::Recipe r = recipe::find_recipe(name);
  for (const auto& kv : set) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) throw nb::value_error(("set: expected key=value, got '" + kv + "'").c_str());
    recipe::set_recipe_field(r, kv.substr(0, eq), kv.substr(eq + 1));
  }
  recipe::validate_recipe(r);
  return r;
}

namespace {

// A cast setting's format name; nullopt for no cast.
std::optional<std::string> cast_name(const recipe::FormatSetting& s) {
  const formats::Format* f = recipe::cast_target(s);
  return f ? std::optional<std::string>(f->name) : std::nullopt;
}

}  // namespace

void bind_recipe(nb::module_& m) {
  using namespace nb::literals;
  using recipe::Recipe;
  nb::enum_<quant::CastScaling>(m, "CastScaling", "How an FP8 cast is scaled (cast_scaling).")
      .value("unit", quant::CastScaling::unit)
      .value("current", quant::CastScaling::current)
      .value("delayed", quant::CastScaling::delayed)
      .value("mx", quant::CastScaling::mx)
      .value("blockwise", quant::CastScaling::blockwise)
      .value("propagate", quant::CastScaling::propagate);
  nb::enum_<formats::ScaleRounding>(m, "ScaleRounding", "An MX block scale's exponent rule (mx_scale_rounding).")
      .value("floor", formats::ScaleRounding::floor)
      .value("ceil", formats::ScaleRounding::ceil);
  nb::enum_<formats::Fp4Scale>(m, "Fp4Format", "The 4-bit block format (fp4_format).")
      .value("nvfp4", formats::Fp4Scale::nvfp4)
      .value("mxfp4", formats::Fp4Scale::mxfp4);
  nb::enum_<quant::RhtMode>(m, "RhtMode", "The Hadamard transform's signs (rht).")
      .value("none", quant::RhtMode::none)
      .value("random", quant::RhtMode::random)
      .value("deterministic", quant::RhtMode::deterministic);
  nb::enum_<recipe::Fp4Rounding>(m, "Fp4Rounding", "Which FP4 inputs round stochastically (fp4_sr).")
      .value("none", recipe::Fp4Rounding::none)
      .value("gradients", recipe::Fp4Rounding::gradients)
      .value("backward", recipe::Fp4Rounding::backward);
  nb::enum_<autograd::OperandRole>(m, "OperandRole", "Which operand of a matrix product a cast is for.")
      .value("activation", autograd::OperandRole::activation)
      .value("weight", autograd::OperandRole::weight)
      .value("grad_output", autograd::OperandRole::grad_output);

  nb::class_<Recipe>(m, "Recipe",
                     "A recipe by name with key=value overrides, validated as `mantissa train --set` does.")
      .def("__init__", [](Recipe* r, const std::string& name, const std::vector<std::string>& set) {
        new (r) Recipe(resolved_recipe(name, set));
      }, "name"_a, "set"_a = std::vector<std::string>{})
      .def_ro("name", &Recipe::name)
      .def_ro("description", &Recipe::description)
      .def_prop_ro("matmul_format", [](const Recipe& r) { return r.matmul_format.name(); })
      .def_prop_ro("cast_forward", [](const Recipe& r) { return cast_name(r.cast_forward); },
                   "The forward operands' cast format; None: not cast.")
      .def_prop_ro("cast_backward", [](const Recipe& r) { return cast_name(r.cast_backward); },
                   "The output gradients' cast format; None: not cast.")
      .def_ro("cast_scaling", &Recipe::cast_scaling)
      .def_ro("amax_history", &Recipe::amax_history)
      .def_ro("cast_margin", &Recipe::cast_margin)
      .def_ro("mx_scale_rounding", &Recipe::mx_scale_rounding)
      .def_ro("cast_readout", &Recipe::cast_readout)
      .def_prop_ro("fp4_format", [](const Recipe& r) { return r.fp4.format.value(); },
                   "None: no FP4 products.")
      .def_prop_ro("fp4_forward", [](const Recipe& r) { return r.fp4.forward; })
      .def_prop_ro("fp4_backward", [](const Recipe& r) { return r.fp4.backward; })
      .def_prop_ro("fp4_weight_2d", [](const Recipe& r) { return r.fp4.weight_2d; })
      .def_prop_ro("rht", [](const Recipe& r) { return r.fp4.rht.value(); })
      .def_prop_ro("rht_dgrad", [](const Recipe& r) { return r.fp4.rht_dgrad; })
      .def_prop_ro("fp4_sr", [](const Recipe& r) { return r.fp4.sr.value(); })
      .def_prop_ro("bf16_blocks", [](const Recipe& r) { return r.fp4.bf16_layers.value().blocks; },
                   "bf16_layers' block indices (negative from the end).")
      .def_prop_ro("bf16_head", [](const Recipe& r) { return r.fp4.bf16_layers.value().head; },
                   "Whether bf16_layers names the head.")
      .def_prop_ro("rht_seed", [](const Recipe& r) { return r.fp4.seed; })
      .def("to_json", [](const Recipe& r) { return recipe::recipe_to_json(r); }, "Every setting as JSON.")
      .def("__getstate__", [](const Recipe& r) { return recipe::recipe_to_json(r); })
      .def("__setstate__", [](Recipe& r, const std::string& json) { new (&r) Recipe(recipe::recipe_from_json(json)); })
      .def("__repr__", [](const Recipe& r) { return "Recipe('" + r.name + "')"; });

  m.def("recipes", [] {
    std::vector<std::string> out;
    for (const auto& r : recipe::recipes()) out.push_back(recipe::recipe_to_json(r));
    return out;
  }, "Every registered recipe as JSON (the keys --set takes).");
  m.def("recipe", [](const std::string& name, const std::vector<std::string>& set) {
    return recipe::recipe_to_json(resolved_recipe(name, set));
  }, "name"_a, "set"_a = std::vector<std::string>{}, "A recipe with key=value overrides, as JSON.");
}

}  // namespace mantissa::py
