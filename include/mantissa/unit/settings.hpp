// A model's unit settings from the command line: the `--set unit.KEY=VALUE`
// entries, applied to a UnitConfig (the other --set entries are the recipe's).
#pragma once

#include <string>
#include <vector>

#include "mantissa/unit/config.hpp"

namespace mantissa::unit {

// Splits "unit.KEY=VALUE" entries off `set` (the rest is returned) and
// applies them to u: keys rule_set, constraint, constraint.OP (OP: linear,
// readout, gelu, relu, add), tau_attn, tau_mlp, attn_mult, loss_mult,
// residual_mult, residual_attn_ratio. Throws std::invalid_argument naming
// the --set entry.
std::vector<std::string> take_settings(const std::vector<std::string>& set, UnitConfig& u);

}  // namespace mantissa::unit
