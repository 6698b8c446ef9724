// Storage formats of Adam's moments. Syntax of
// Recipe::optimizer_state_format / OptimizerConfig::state_format:
//   "F"     both moments in format F
//   "M/V"   first moment (exp_avg) in M, second moment (exp_avg_sq) in V,
//           e.g. "e4m3fn/fp16" (MS-AMP O2: FP8 m, FP16 v)
// with F, M, V one of fp32, bf16, fp16, e4m3fn, e5m2, e4m3fnuz, e5m2fnuz.
// Every moment not in fp32 or bf16 carries a per-tensor power-of-two scale
// (Tensor::scale) chosen each step from the updated moment's max |value| so
// that it maps into the format's range; bf16 covers fp32's range and keeps
// scale 1.
#pragma once

#include <string>
#include <string_view>

#include "mantissa/tensor/tensor.hpp"

namespace mantissa::optim {

struct StateFormat {
  DType m = DType::f32;
  DType v = DType::f32;
  bool is_fp32() const { return m == DType::f32 && v == DType::f32; }
};

// Throws std::invalid_argument naming the bad part and the valid formats.
StateFormat parse_state_format(std::string_view spec);
// Canonical spelling: "fp32", "fp16", "e4m3fn/fp16", ...
std::string state_format_name(const StateFormat& f);

// True if moments in this dtype get a per-tensor scale (all but fp32, bf16).
bool state_dtype_scaled(DType t);
// The power-of-two scale s with amax / s <= max finite of t, as small as that
// allows (amax / s in (max/2, max]); `previous` when amax is 0 or not finite
// (an all-zero moment is "any scale"), 1 for unscaled dtypes.
float state_scale_for(DType t, float amax, float previous);

}  // namespace mantissa::optim
