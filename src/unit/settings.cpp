#include "mantissa/unit/settings.hpp"

#include <stdexcept>

#include "mantissa/formats/parse_number.hpp"
#include "mantissa/io/untrusted.hpp"

namespace mantissa::unit {

namespace {
double parse_number(const std::string& entry, const std::string& value) {
  double v = 0;
  if (!formats::parse_number(value, v))
    throw std::invalid_argument("--set " + io::excerpt(entry) + ": '" + io::excerpt(value) + "' is not a number");
  return v;
}
}  // namespace

std::vector<std::string> take_settings(const std::vector<std::string>& set, UnitConfig& u) {
  std::vector<std::string> rest;
  for (const std::string& kv : set) {
    if (kv.rfind("unit.", 0) != 0) {
      rest.push_back(kv);
      continue;
    }
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("--set expects key=value (got '" + kv + "')");
    const std::string key = kv.substr(5, eq - 5), value = kv.substr(eq + 1);
    if (key == "rule_set") u.rule_set = value;
    else if (key == "constraint") u.constraint = value;
    else if (key.rfind("constraint.", 0) == 0) u.op_constraints[key.substr(11)] = value;
    else if (key == "tau_attn") u.tau_attn = parse_number(kv, value);
    else if (key == "tau_mlp") u.tau_mlp = parse_number(kv, value);
    else if (key == "attn_mult") u.attn_mult = parse_number(kv, value);
    else if (key == "loss_mult") u.loss_mult = parse_number(kv, value);
    else if (key == "residual_mult") u.residual_mult = parse_number(kv, value);
    else if (key == "residual_attn_ratio") u.residual_attn_ratio = parse_number(kv, value);
    else
      throw std::invalid_argument("--set " + kv + ": unknown unit key '" + key +
                                  "' (valid: rule_set, constraint, constraint.OP, tau_attn, tau_mlp, attn_mult, loss_mult, "
                                  "residual_mult, residual_attn_ratio)");
    try {
      u.validate();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("--set " + kv + ": " + e.what());
    }
  }
  return rest;
}

}  // namespace mantissa::unit
