// exp and the logistic function as straight-line float arithmetic, so loops
// that call them vectorise (libm's expf/tanhf calls block vectorisation
// without -ffast-math). exp: Cody-Waite range reduction x = n ln2 + r,
// |r| <= ln2/2, degree-7 Taylor polynomial (truncation < 1e-8 relative), and
// 2^n built in the exponent bits: about 2 ulp over the normal range.
#pragma once

#include <bit>
#include <cstdint>

// Hot loops get an AVX-512 clone picked at load time (the library itself is
// built for the baseline x86-64 ISA). Sanitizer builds skip the clones.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define MANTISSA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MANTISSA_CLONES
#endif

namespace mantissa::kernels {

inline float vexp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;          // exact in 9 bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;       // ln2 - kLn2Hi
  constexpr float kRound = 12582912.0f;           // 1.5 * 2^23: adding it rounds to an integer
  // Clamped so the integer conversion below is always defined (NaN -> -87).
  const float xc = x > -87.0f ? (x < 88.0f ? x : 88.0f) : -87.0f;
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f + r * (1.0f / 40320.0f);
  p = 1.0f / 720.0f + r * p;
  p = 1.0f / 120.0f + r * p;
  p = 1.0f / 24.0f + r * p;
  p = 1.0f / 6.0f + r * p;
  p = 0.5f + r * p;
  p = 1.0f + r * p;
  p = 1.0f + r * p;
  const int32_t e = static_cast<int32_t>(n) + 127;
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(e) << 23);
  const float y = p * scale;
  // Beyond the clamp: exact underflow to 0 and overflow to +inf (as expf).
  if (x != x) return x;  // NaN propagates
  return x < -87.0f ? 0.0f : (x > 88.0f ? std::bit_cast<float>(0x7f800000u) : y);
}

// 1 / (1 + e^-x)
inline float vsigmoid(float x) { return 1.0f / (1.0f + vexp(-x)); }

}  // namespace mantissa::kernels
