// The exact GELU, gelu(x) = x Phi(x) with Phi the standard normal CDF
// (transformers' "gelu", PyTorch's approximate="none"), written as one
// sequence of fp32 operations that the scalar reference below and the AVX2
// and AVX-512 kernels (gelu_avx2.cpp, gelu_avx512.cpp) all perform in the
// same order, with the same fused multiply-adds, so every path gives the
// same bits (tests/kernels/test_backend_ops.cpp checks it).
//
// With a = min(|x|, 15) and the upper tail Q(a) = 1 - Phi(a):
//   Q(a)  = t H(t) e^(-a^2/2),  t = 4 / (4 + a) in [0.21, 1],
// H a degree-10 polynomial in t - kErfMid (least squares on the relative
// error, coefficients rounded to fp32 one by one with the rest refitted:
// 3.6e-9 relative to float64 erfc on [0, 15]). e^(-a^2/2) keeps its
// accuracy in the far tails: a^2 = sq + sq_lo exactly (FMA), e^(-sq/2) is
// 2^n p(r) (exp's Cody-Waite reduction and degree-8 polynomial, vec_math.hpp)
// and e^(-sq_lo/2) is taken as 1 - sq_lo/2. 2^n (n down to -162) is two
// normal factors 2^n1 2^n2 applied last, the first exactly, so results that
// round to subnormals are rounded once.
//   forward:  x < 0: x Q(a)                x >= 0: x (1 - Q(a))
//   slope:    x < 0: Q(a) - a phi(a)       x >= 0: 1 - (Q(a) - a phi(a))
// except for |x| < 1, where two polynomials in x^2 give both (below).
// with phi(a) = e^(-a^2/2) / sqrt(2 pi), so both share e^(-a^2/2) (t H - a /
// sqrt(2 pi)). Beyond |x| = 15 the tail terms are below 1e-49 (x Q rounds
// to -0, 1 - Q to 1). A NaN input gives NaN: the clamp keeps it (minps
// returns its second operand when one is NaN, as `15 < a ? 15 : a` does).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/vec_math.hpp"

// GCC contracts a * b + c into an FMA in FMA-enabled code (C++ and the
// intrinsics' vector operators alike); every function of the family is
// compiled without it, so that the only FMAs are the written ones.
#define MANTISSA_NO_CONTRACT __attribute__((optimize("fp-contract=off")))

namespace mantissa::kernels {

inline constexpr float kErfClamp = 15.0f;
inline constexpr float kErfT = 4.0f;           // t = kErfT / (kErfT + a)
inline constexpr float kErfMid = 0.6052632f;   // H is a polynomial in t - kErfMid
inline constexpr float kErfH[11] = {0.22557092f,  0.39901063f,  0.5215892f,    0.47993448f,
                                    0.26206696f,  0.014005552f, -0.088587284f, -0.03362554f,
                                    0.031881317f, 0.016283633f, -0.011547184f};
inline constexpr float kInvSqrt2Pi = 0.3989423f;
// |x| < kErfSmall: Phi(x) = 1/2 + x P(x^2) and the slope 1/2 + x R(x^2)
// (degree 5, least squares, 2.8e-8 relative: the fp32 rounding of 1/sqrt(2
// pi)), where 1 - Q(a), Q near 1/2, would carry Q's rounding errors.
inline constexpr float kErfSmall = 1.0f;
inline constexpr float kErfP[6] = {0.3989423f,    -0.06649059f,  0.009974603f,
                                   -0.0011892292f, 0.00011636525f, -8.6949485e-06f};
inline constexpr float kErfR[6] = {0.7978846f,   -0.26596174f,  0.059840765f,
                                   -0.00949073f, 0.0011332335f, -9.064937e-05f};
inline constexpr float kErfRound = 12582912.0f;  // 1.5 * 2^23: (v + it) - it rounds v to an integer

// What the forward and the slope share, per element.
struct GeluErfParts {
  float a, th, p, s1, s2;  // |x| clamped, t H(t), e^(-a^2/2) / 2^n, 2^n = s1 s2
};

// The scalar reference, operation for operation as the vector kernels.
MANTISSA_NO_CONTRACT inline GeluErfParts gelu_erf_parts(float x) {
  GeluErfParts g;
  const float ax = std::fabs(x);
  g.a = kErfClamp < ax ? kErfClamp : ax;
  const float t = kErfT / (kErfT + g.a);
  const float s = t - kErfMid;
  float h = kErfH[10];
  for (int k = 9; k >= 0; --k) h = std::fma(h, s, kErfH[k]);
  g.th = t * h;
  const float sq = g.a * g.a;
  const float sq_lo = std::fma(g.a, g.a, -sq);
  const float y = -0.5f * sq;  // exact
  const float n = (y * kExpLog2e + kErfRound) - kErfRound;
  float r = std::fma(-n, kExpLn2Hi, y);
  r = std::fma(-n, kExpLn2Lo, r);
  float p = kExpTaylor[0];
  for (int k = 1; k < 9; ++k) p = std::fma(r, p, kExpTaylor[k]);
  g.p = std::fma(p, -0.5f * sq_lo, p);
  const int32_t ni = n == n ? static_cast<int32_t>(n) : 0;  // NaN: any factors (the rest is NaN)
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  g.s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  g.s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  return g;
}

// c[5] u^5 + ... + c[0] in Horner form.
MANTISSA_NO_CONTRACT inline float gelu_erf_poly5(const float (&c)[6], float u) {
  float r = c[5];
  for (int k = 4; k >= 0; --k) r = std::fma(r, u, c[k]);
  return r;
}

MANTISSA_NO_CONTRACT inline float gelu_erf_ref(float x) {
  const GeluErfParts g = gelu_erf_parts(x);
  const float m = g.p * g.th;
  const float neg = ((-g.a * m) * g.s1) * g.s2;
  const float pos = x * (1.0f - (m * g.s1) * g.s2);
  const float small = x * std::fma(x, gelu_erf_poly5(kErfP, x * x), 0.5f);
  return g.a < kErfSmall ? small : x < 0.0f ? neg : pos;
}

MANTISSA_NO_CONTRACT inline float gelu_erf_slope_ref(float x) {
  const GeluErfParts g = gelu_erf_parts(x);
  const float w = (g.p * std::fma(g.a, -kInvSqrt2Pi, g.th) * g.s1) * g.s2;
  const float small = std::fma(x, gelu_erf_poly5(kErfR, x * x), 0.5f);
  return g.a < kErfSmall ? small : x < 0.0f ? w : 1.0f - w;
}

// The vector kernels (same contract as the tanh ones in row_math.hpp).
void gelu_erf_forward_avx512(float* out, const float* x, int64_t n, float scale);
void gelu_erf_backward_avx512(float* dx, const float* x, const float* dout, int64_t n, bool accumulate, float scale);
void gelu_erf_forward_avx2(float* out, const float* x, int64_t n, float scale);
void gelu_erf_backward_avx2(float* dx, const float* x, const float* dout, int64_t n, bool accumulate, float scale);
// Dispatch through the table of gelu_erf.cpp.
void span_gelu_erf_forward(float* out, const float* x, int64_t n, float scale);
void span_gelu_erf_backward(float* dx, const float* x, const float* dout, int64_t n, bool accumulate, float scale);
const char* gelu_erf_implementation();

}  // namespace mantissa::kernels
