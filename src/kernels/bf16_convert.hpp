// fp32 <-> bf16 conversion for matmul operands (round to nearest even; NaN
// stays NaN). Written as plain loops over integers so GCC vectorises them.
#pragma once

#include <bit>
#include <cstdint>

namespace mantissa::kernels {

// Branch-free (a select, not a jump) so loops over it vectorise.
inline uint16_t f32_to_bf16_one(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float bf16_to_f32_one(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

void f32_to_bf16(uint16_t* out, const float* in, int64_t n);
void bf16_to_f32(float* out, const uint16_t* in, int64_t n);

}  // namespace mantissa::kernels
