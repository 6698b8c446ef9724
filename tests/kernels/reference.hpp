// Shared helpers for the kernel tests: seeded random data and float64
// comparison with error bounds derived from fp32 rounding.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace mantissa::kernels::test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// GELU, tanh approximation (GPT-2), and its derivative, in float64.
inline double gelu_ref(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

inline double gelu_grad_ref(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  const double u = s * (x + 0.044715 * x * x * x);
  const double th = std::tanh(u);
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

constexpr double kEps32 = 1.0 / (1 << 24);  // unit roundoff of fp32

// Every element within atol + rtol |ref|; reports the first few failures by index.
inline void expect_near_all(const std::vector<float>& got, const std::vector<double>& ref, double rtol,
                            double atol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double tol = atol + rtol * std::abs(ref[i]);
    if (!(std::abs(static_cast<double>(got[i]) - ref[i]) <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << ref[i] << " tol " << tol;
      ++failures;
    }
  }
}

// Round to the nearest bf16, ties to even, computed from distances in double
// (independent of the bit trick the library uses).
inline float round_to_bf16(float x) {
  if (std::isnan(x)) return x;
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t lo_bits = u & 0xffff0000u;
  const uint32_t hi_bits = lo_bits + 0x10000u;  // next bf16 away from zero
  const double lo = std::bit_cast<float>(lo_bits);
  const bool hi_is_inf = (hi_bits & 0x7fffffffu) == 0x7f800000u;
  const double hi = hi_is_inf ? std::copysign(std::ldexp(1.0, 128), x) : std::bit_cast<float>(hi_bits);
  const double dlo = std::abs(x - lo), dhi = std::abs(hi - x);
  if (dlo < dhi) return static_cast<float>(lo);
  if (dhi < dlo) return std::bit_cast<float>(hi_bits);
  return ((lo_bits >> 16) & 1u) == 0 ? static_cast<float>(lo) : std::bit_cast<float>(hi_bits);
}

}  // namespace mantissa::kernels::test
