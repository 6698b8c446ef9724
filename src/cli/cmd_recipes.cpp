// `mantissa recipes [--json | --fields]`: every registered recipe with its settings, or every setting.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.hpp"
#include "mantissa/recipe/recipe.hpp"

namespace mantissa::cli {
namespace {

void print_table() {
  std::printf("%-22s %-8s %-8s %-8s %-8s %-8s %-6s %-9s %-5s %-10s %-8s %-8s %-14s %s\n", "recipe", "param",
              "matmul", "saved", "grads", "weights", "master", "scaling", "norms", "rounding", "cast-fwd", "cast-bwd",
              "cast-scaling", "description");
  for (const auto& r : recipe::recipes()) {
    std::string scaling = recipe::scaling_name(r.loss_scale.method);
    if (r.loss_scale.method == recipe::ScalingMethod::static_scale) scaling += "(" + std::to_string(static_cast<long long>(r.loss_scale.init_scale)) + ")";
    std::string cast_scaling = recipe::cast_scaling_name(r.cast_scaling);
    if (r.cast_scaling == quant::CastScaling::delayed)
      cast_scaling += "(" + std::to_string(static_cast<long long>(r.amax_history)) + ")";
    if (r.cast_scaling == quant::CastScaling::mx)
      cast_scaling += r.mx_scale_rounding == formats::ScaleRounding::ceil ? "(ceil)" : "(floor)";
    std::string state =
        r.optimizer_state_format.value().is_fp32() ? "" : " [optimizer state " + r.optimizer_state_format.name() + "]";
    if (r.fp4.format.value().has_value()) state += " [" + recipe::fp4_summary(r.fp4) + "]";
    std::printf("%-22s %-8s %-8s %-8s %-8s %-8s %-6s %-9s %-5s %-10s %-8s %-8s %-14s %s%s\n", r.name.c_str(),
                recipe::parametrisation_name(r.parametrisation), r.matmul_format.c_str(), r.saved_format.c_str(),
                r.gradient_format.c_str(), r.weight_format.c_str(), r.master_format.c_str(), scaling.c_str(),
                r.norms_fp32 ? "fp32" : "-", recipe::weight_rounding_name(r.weight_rounding),
                r.cast_forward.empty() ? "-" : r.cast_forward.c_str(),
                r.cast_backward.empty() ? "-" : r.cast_backward.c_str(), cast_scaling.c_str(), r.description.c_str(),
                state.c_str());
  }
  std::printf("\napex opt levels: O0 = fp32, O1 = fp16-amp, O2 = fp16-master, O3 = fp16-pure\n"
              "dynamic scaling: init 2^16, x2 every 2000 clean steps, x0.5 on overflow (override with mantissa train "
              "--init-scale, --growth-interval, --growth-factor, --backoff-factor)\n"
              "cast scaling: unit = scale 1; current = per-tensor 2^floor(log2(max/amax)) from this step; "
              "delayed(N) = the same from the max over an N-step amax history; mx = 32-element E8M0 blocks; "
              "blockwise = 1x128 / 128x128 power-of-two blocks; propagate = scale propagation\n");
}

// Every setting --set takes: key, values, default, meaning.
void print_fields() {
  std::printf("%-26s %-54s %-10s %s\n", "setting", "values", "default", "what it sets");
  for (const auto& f : recipe::recipe_fields())
    std::printf("%-26s %-54s %-10s %s\n", f.key.c_str(), f.type.c_str(),
                f.default_value.empty() ? "\"\"" : f.default_value.c_str(), f.description.c_str());
}

Registrar reg(40, [](CLI::App& app) {
  auto* cmd = app.add_subcommand("recipes", "list the precision recipes and their settings");
  auto json = std::make_shared<bool>(false);
  auto fields = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "print a JSON array with every setting");
  cmd->add_flag("--fields", *fields, "list every setting --set takes: its values, default and meaning");
  cmd->callback([json, fields] {
    if (*fields) {
      print_fields();
    } else if (*json) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& r : recipe::recipes()) arr.push_back(nlohmann::json::parse(recipe::recipe_to_json(r)));
      std::printf("%s\n", arr.dump(2).c_str());
    } else {
      print_table();
    }
  });
});

}  // namespace
}  // namespace mantissa::cli
