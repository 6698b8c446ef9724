// How a low-format (FP8, FP16) cast of a matrix-product operand is scaled:
// the one enum the recipes (recipe::Recipe::cast_scaling) and the quantisers share.
#pragma once

#include <cstdint>

namespace mantissa::quant {

//   unit      scale 1, no scaling at all (unit-fp8, fp8-noscale)
//   current   one power-of-two scale per tensor from this step's amax
//   delayed   one power-of-two scale per tensor from an amax history
//             (Transformer Engine DelayedScaling: max over `amax_history`
//             steps, margin `cast_margin`)
//   mx        32-element blocks along the contraction dim, E8M0 scales (OCP MX)
//   blockwise 1x128 activation tiles and 128x128 weight blocks, power-of-two
//             scales (DeepSeek-V3)
//   propagate scale propagation (Scalify): scales travel with the tensors
//             (ScalifyQuantiser; the others are Fp8Quantiser's)
enum class CastScaling : uint8_t { unit, current, delayed, mx, blockwise, propagate };

}  // namespace mantissa::quant
