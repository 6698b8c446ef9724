// exp and the logistic function as straight-line float arithmetic, so loops
// that call them vectorise (libm's expf/tanhf calls block vectorisation
// without -ffast-math). exp: Cody-Waite range reduction x = n ln2 + r,
// |r| <= ln2/2, degree-8 Taylor polynomial (truncation < 1e-8 relative), and
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

// exp's range reduction and Taylor coefficients 1/k! (k = 8 .. 0, Horner
// order), shared with the AVX-512 GELU kernels (gelu_avx512.cpp).
inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpLn2Hi = 0.693359375f;     // exact in 9 bits: n * kExpLn2Hi is exact
inline constexpr float kExpLn2Lo = -2.12194440e-4f;  // ln2 - kExpLn2Hi
inline constexpr float kExpTaylor[9] = {1.0f / 40320.0f, 1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f,
                                        1.0f / 6.0f,     0.5f,           1.0f,          1.0f};

inline float vexp(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // Clamped so the integer conversion below is always defined (NaN -> -87).
  const float xc = x > -87.0f ? (x < 88.0f ? x : 88.0f) : -87.0f;
  const float n = (xc * kExpLog2e + kRound) - kRound;
  const float r = (xc - n * kExpLn2Hi) - n * kExpLn2Lo;
  float p = kExpTaylor[1] + r * kExpTaylor[0];
  p = kExpTaylor[2] + r * p;
  p = kExpTaylor[3] + r * p;
  p = kExpTaylor[4] + r * p;
  p = kExpTaylor[5] + r * p;
  p = kExpTaylor[6] + r * p;
  p = kExpTaylor[7] + r * p;
  p = kExpTaylor[8] + r * p;
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
