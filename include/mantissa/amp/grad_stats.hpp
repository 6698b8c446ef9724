// Underflow / overflow diagnostics: how the (loss-scaled) gradients would
// fare in a low-precision format. Per parameter group, the fraction of values
// that are exactly zero, that fall below the format's smallest subnormal and
// would flush to zero, that land in the subnormal range (losing precision),
// and that overflow (or are already non-finite). This is what shows why
// fp16 without loss scaling fails (Micikevicius et al., "Mixed Precision
// Training", ICLR 2018: part of the gradients is below fp16's range).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mantissa/formats/format.hpp"
#include "mantissa/nn/module.hpp"

namespace mantissa::amp {

struct GradRangeCounts {
  int64_t total = 0;
  int64_t zero = 0;       // exactly 0 already
  int64_t flushed = 0;    // 0 < |g| < min_subnormal: round to 0 (or min_subnormal) in the format
  int64_t subnormal = 0;  // min_subnormal <= |g| < min_normal
  int64_t overflow = 0;   // |g| > max finite, or inf/NaN
  void add(const GradRangeCounts& o);
};

struct GradGroupStats {
  std::string group;  // e.g. "attn.c_attn.weight" (layers merged), or "all"
  GradRangeCounts counts;
};

// The group a parameter belongs to: its name without the "transformer."
// prefix and the layer index ("transformer.h.3.mlp.c_fc.weight" ->
// "mlp.c_fc.weight"), so that a group collects the same role across layers.
std::string grad_group_name(const std::string& parameter_name);

GradRangeCounts classify(const formats::Format& f, const float* g, int64_t n);

// Groups in first-appearance order, followed by "all".
std::vector<GradGroupStats> gradient_range_stats(const formats::Format& f, const std::vector<autograd::Parameter*>& params);

// {"format": "fp16", "groups": {"wte.weight": {"zero": .., "flushed": .., "subnormal": .., "overflow": ..}, ...}}
// with fractions of the group's value count.
std::string grad_stats_json(const formats::Format& f, const std::vector<GradGroupStats>& stats);

}  // namespace mantissa::amp
