// The parametrisation as the models' config.json files carry it, in the
// object the model keeps its own settings in: "parametrisation" ("standard",
// "unit" or "umup") and, when unit or umup, the "unit" settings
// (unit/config.hpp).
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "mantissa/unit/config.hpp"

namespace mantissa::nn {

// Json: nlohmann::json or ordered_json (the "unit" object keeps sorted keys).
template <class Json>
void write_parametrisation(Json& o, const unit::UnitConfig& unit) {
  o["parametrisation"] = unit.umup ? "umup" : unit.enabled ? "unit" : "standard";
  if (unit.enabled) o["unit"] = nlohmann::json::parse(unit.to_json());
}

// Reads what write_parametrisation wrote (absent keys leave `unit` as it is);
// throws std::invalid_argument "<model> config: parametrisation must be ...".
// umup: whether the model implements u-muP.
template <class Json>
void read_parametrisation(const Json& o, unit::UnitConfig& unit, const char* model, bool umup = false) {
  if (o.contains("unit")) unit = unit::UnitConfig::from_json(o["unit"].dump());
  if (o.contains("parametrisation")) {
    const std::string p = o["parametrisation"].template get<std::string>();
    if (p != "unit" && p != "standard" && !(umup && p == "umup"))
      throw std::invalid_argument(std::string(model) + " config: parametrisation must be standard" +
                                  (umup ? ", unit or umup" : " or unit") + ", got '" + p + "'");
    unit.enabled = p != "standard";
    unit.umup = p == "umup";
  }
}

// Reads "norm" ("pre" or "post"; absent: pre_norm as it is); throws
// std::invalid_argument "<model> config: norm must be pre or post, ...".
template <class Json>
void read_norm(const Json& o, bool& pre_norm, const char* model) {
  if (!o.contains("norm")) return;
  const std::string n = o["norm"].template get<std::string>();
  if (n != "pre" && n != "post")
    throw std::invalid_argument(std::string(model) + " config: norm must be pre or post, got '" + n + "'");
  pre_norm = n == "pre";
}

}  // namespace mantissa::nn
