// bf16 <-> fp32 one value at a time, inline, for kernels that round a value
// as they compute it (softmax probabilities, norm and GELU outputs, matmul
// operands): round to nearest even, NaN kept NaN (quietened, sign kept).
// The bits are the reference's (round.hpp: encode(preset("bf16"), x)); tests
// compare them. Written branch-free over integers so loops over it vectorise;
// whole arrays go through quantize() (convert.hpp) instead.
#pragma once

#include <bit>
#include <cstdint>

namespace mantissa::formats {

inline uint16_t round_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// Exact: the code is the top half of the fp32 word.
inline float widen_bf16(uint16_t code) { return std::bit_cast<float>(static_cast<uint32_t>(code) << 16); }

}  // namespace mantissa::formats
