#include "mantissa/unit/config.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include "mantissa/io/untrusted.hpp"

namespace mantissa::unit {

namespace {
const char* kOps[] = {"linear", "readout", "gelu", "relu", "silu", "add"};

bool known_op(const std::string& op) {
  for (const char* k : kOps)
    if (op == k) return true;
  return false;
}

void positive(double v, const char* name) {
  if (!(v > 0) || !std::isfinite(v))
    throw std::invalid_argument(std::string("unit config: ") + name + " must be positive and finite, got " +
                                std::to_string(v));
}
}  // namespace

void UnitConfig::validate() const {
  unit::parse_rule_set(rule_set);
  if (!constraint.empty()) unit::parse_constraint(constraint);
  for (const auto& [op, c] : op_constraints) {
    if (!known_op(op))
      throw std::invalid_argument("unit config: unknown op '" + op + "' in op_constraints (valid: linear, readout, gelu, relu, silu, add)");
    unit::parse_constraint(c);
  }
  if (!(tau_attn >= 0) || !(tau_mlp >= 0) || !std::isfinite(tau_attn) || !std::isfinite(tau_mlp))
    throw std::invalid_argument("unit config: residual taus must be finite and >= 0");
  positive(attn_mult, "attn_mult");
  positive(loss_mult, "loss_mult");
  positive(residual_mult, "residual_mult");
  positive(residual_attn_ratio, "residual_attn_ratio");
  if (umup && !enabled) throw std::invalid_argument("unit config: umup needs the unit parametrisation (enabled)");
}

unit::Rules UnitConfig::rules(const std::string& op) const {
  unit::Rules r{unit::parse_rule_set(rule_set), std::nullopt};
  if (auto it = op_constraints.find(op); it != op_constraints.end()) r.constraint = unit::parse_constraint(it->second);
  else if (!constraint.empty()) r.constraint = unit::parse_constraint(constraint);
  return r;
}

unit::Rules UnitConfig::branch_linear_rules() const {
  unit::Rules r = rules("linear");
  if (!r.constraint) r.constraint = unit::Constraint::none;
  return r;
}

std::string UnitConfig::to_json() const {
  nlohmann::ordered_json j;
  j["enabled"] = enabled;
  j["rule_set"] = rule_set;
  j["constraint"] = constraint;
  j["op_constraints"] = op_constraints;
  j["tau_attn"] = tau_attn;
  j["tau_mlp"] = tau_mlp;
  j["attn_mult"] = attn_mult;
  j["loss_mult"] = loss_mult;
  if (umup) {  // only then, so unit models' config.json stays as it was
    j["umup"] = true;
    j["residual_mult"] = residual_mult;
    j["residual_attn_ratio"] = residual_attn_ratio;
  }
  return j.dump();
}

UnitConfig UnitConfig::from_json(const std::string& text) {
  UnitConfig u;
  try {
    const nlohmann::json j = io::parse_json(text, "unit config");
    for (const auto& [key, value] : j.items()) {
      if (key == "enabled") u.enabled = value.get<bool>();
      else if (key == "rule_set") u.rule_set = value.get<std::string>();
      else if (key == "constraint") u.constraint = value.get<std::string>();
      else if (key == "op_constraints") u.op_constraints = value.get<std::map<std::string, std::string>>();
      else if (key == "tau_attn") u.tau_attn = value.get<double>();
      else if (key == "tau_mlp") u.tau_mlp = value.get<double>();
      else if (key == "attn_mult") u.attn_mult = value.get<double>();
      else if (key == "loss_mult") u.loss_mult = value.get<double>();
      else if (key == "umup") u.umup = value.get<bool>();
      else if (key == "residual_mult") u.residual_mult = value.get<double>();
      else if (key == "residual_attn_ratio") u.residual_attn_ratio = value.get<double>();
      else throw std::invalid_argument("unit config: unknown key '" + key + "'");
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("unit config: ") + e.what());
  }
  u.validate();
  return u;
}

}  // namespace mantissa::unit
