// The keys of a Hugging Face config.json that change a model's function but
// that mantissa's models do not read as settings: each must be absent or hold
// the one value the model computes, so a config (or checkpoint) that asks for
// another activation, position scheme, norm epsilon or layout is refused by
// name instead of being evaluated with the wrong function.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "mantissa/io/untrusted.hpp"

namespace mantissa::nn {

struct FixedKey {
  const char* key;
  nlohmann::json accepted;  // one value, or an array of equivalent values
  const char* computes;     // what the model computes instead, for the message
};

namespace detail {
// Integers compare exactly; other numbers as the float32 the models apply
// them in (a rate saved from a float reads back as its double).
inline bool same_value(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number_integer() && b.is_number_integer()) return a == b;
  if (a.is_number() && b.is_number()) return static_cast<float>(a.get<double>()) == static_cast<float>(b.get<double>());
  return a == b;
}
}  // namespace detail

// Throws std::invalid_argument "<model> config: '<key>' is <value>, but ..."
// for the first key of `keys` that `j` holds with a value not accepted.
inline void require_fixed_keys(const nlohmann::json& j, const char* model, std::initializer_list<FixedKey> keys) {
  for (const FixedKey& k : keys) {
    if (!j.contains(k.key)) continue;
    const nlohmann::json& v = j[k.key];
    bool ok = false;
    if (k.accepted.is_array())
      for (const auto& a : k.accepted) ok = ok || detail::same_value(v, a);
    else
      ok = detail::same_value(v, k.accepted);
    if (!ok)
      throw std::invalid_argument(std::string(model) + " config: '" + k.key + "' is " + io::excerpt_json(v) + ", but mantissa's " +
                                  model + " computes " + k.computes + " (accepted: " + k.accepted.dump() + ")");
  }
}

}  // namespace mantissa::nn
