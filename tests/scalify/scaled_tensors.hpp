// Test helpers for the scale-propagation rules: a scaled tensor of normal
// data at scale 2^e, its values in float64, and the comparison of a rule's
// result with a float64 reference relative to the reference's largest entry.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "mantissa/scalify/scaled.hpp"
#include "reference_ops.hpp"

namespace mantissa::scalify::test {

// Data ~ N(0, 1) x data_mult, scale 2^e: the value is data x 2^e.
inline ScaledTensor make_scaled(const Shape& shape, int e, uint64_t seed, double data_mult = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> d(static_cast<size_t>(shape_numel(shape)));
  for (float& v : d) v = static_cast<float>(nd(rng) * data_mult);
  ScaledTensor s;
  s.data = Tensor::from(d, shape);
  s.scales = {std::ldexp(1.0f, e)};
  return s;
}

inline ref::Vec values(const ScaledTensor& x) { return x.values_f64(); }

// max |got - want| <= tol (max |want| + tiny).
inline void expect_close(const ScaledTensor& got, const ref::Vec& want, double tol, const std::string& what) {
  const ref::Vec g = values(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  double worst = 0, mx = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    worst = std::max(worst, std::abs(g[i] - want[i]));
    mx = std::max(mx, std::abs(want[i]));
  }
  EXPECT_LE(worst, tol * (mx + 1e-300)) << what << ": worst abs error " << worst << " of max " << mx;
}

}  // namespace mantissa::scalify::test
