// The unit-scaled parametrisation of a model: which scaling rules
// (unit/rules.hpp) the model applies, with a model-wide constraint and
// per-op overrides, the residual taus and the u-muP multipliers. Saved in the
// model's config.json under "mantissa" -> "unit".
#pragma once

#include <map>
#include <string>

#include "mantissa/unit/rules.hpp"

namespace mantissa::unit {

struct UnitConfig {
  bool enabled = false;                // false: the standard parametrisation
  std::string rule_set = "library";    // "library" (unit-scaling 0.3.5) or "paper" (ICML 2023)
  std::string constraint;              // model-wide constraint; "" = the rule set's default
  // Per-op overrides by op kind: "linear", "readout", "gelu", "relu", "silu", "add".
  std::map<std::string, std::string> op_constraints;
  double tau_attn = 0.01;  // residual tau of attention branches (library auto rule)
  double tau_mlp = 0.5;    // residual tau of every other branch
  double attn_mult = 1.0;  // u-muP attention logit multiplier (logits x mult / d_head)
  double loss_mult = 1.0;  // cross-entropy `mult` on the logits
  // u-muP (Blake et al. 2025): non-parametric norms (no gains or shifts) and
  // the depth-dependent residual taus of unit::transformer_residual_tau
  // (residual_mult, residual_attn_ratio) in place of tau_attn / tau_mlp.
  bool umup = false;
  double residual_mult = 1.0;
  double residual_attn_ratio = 1.0;

  // Throws std::invalid_argument naming the field and the valid values.
  void validate() const;
  // The rules one op kind applies (its override, else the model-wide constraint).
  unit::Rules rules(const std::string& op) const;
  // The rules of a linear inside a residual branch whose paths all cross alike
  // scales (the Llama's and BERT's blocks): the linear override or model-wide
  // constraint if one is set, else none (unit output and unit input gradient;
  // residual_split divides the branch's mismatch out).
  unit::Rules branch_linear_rules() const;
  // JSON object text, and back (unknown keys are an error).
  std::string to_json() const;
  static UnitConfig from_json(const std::string& text);
};

}  // namespace mantissa::unit
