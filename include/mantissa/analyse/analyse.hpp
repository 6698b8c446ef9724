// The per-op scale analysis (`mantissa analyse`): one
// batch through a model (at initialisation or from a checkpoint) under a
// recipe, recording for every op output and every gradient arriving at it,
// and for every parameter and its gradient, RMS, std, mean |x|, max |x|,
// min |x| and the shares that would underflow or overflow in the recipe's
// formats. Library API so experiments can draw standard-vs-unit figures.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/unit/stats.hpp"
#include "mantissa/train/config.hpp"

namespace mantissa::analyse {

struct AnalyseOptions {
  // Model kind, size flags, recipe (+ --set, including unit.* keys), data,
  // batch size, sequence length and seed, as for `mantissa train`.
  train::TrainConfig config;
  std::string checkpoint;  // "" = at initialisation; else a model or training checkpoint directory
};

struct Analysis {
  std::string recipe;
  std::string parametrisation;  // "standard" or "unit"
  std::string rule_set;         // unit rule set ("library" | "paper"); empty for the standard model
  std::string forward_format;   // what the forward rows' shares are measured against
  std::string backward_format;
  double loss = 0;              // mean loss of the batch (nats)
  // Op outputs ("embedding", "h0.attn.qkv", ...) forward and backward, in model order.
  unit::ScaleRecorder ops;
  // Parameters (forward: the weight; backward: its gradient), in parameter order.
  unit::ScaleRecorder params;
};

// Rows of `ops` that the unit rules do not aim at unit RMS, each with the
// reason: (op, pass, reason). Empty for the standard parametrisation.
struct UnitExclusion {
  std::string op;
  unit::Pass pass;
  std::string reason;
};
std::vector<UnitExclusion> unit_exclusions(const Analysis& a);
// What the table's unit-scale check covers and leaves out, with the reasons
// (printed by `mantissa analyse` under the table).
std::string analysis_notes(const Analysis& a);

// Runs the batch and records; throws std::invalid_argument for bad input
// (unknown recipe or flag value, missing data, unreadable checkpoint).
// Formats: forward = recipe.cast_forward or else matmul_format; backward =
// recipe.cast_backward or else matmul_format (the dtype gradients enter the
// matrix products in). The loss seed carries the recipe's initial loss scale.
Analysis analyse(const AnalyseOptions& options);

// Every row (ops, then parameters) as a table / as scales.csv text.
std::string analysis_table(const Analysis& a);
std::string analysis_csv(const Analysis& a);

// Writes DIR/scales.csv (ops then parameters) and DIR/scales.svg (forward and
// backward RMS per op on a log2 axis, one line per model in `models`, ops in
// the first model's order). Creates DIR; files written atomically.
void write_analysis(const std::string& dir, const std::vector<std::pair<std::string, const Analysis*>>& models,
                    const std::string& title);

}  // namespace mantissa::analyse
