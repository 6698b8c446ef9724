// Brute-force casts for the inspector's tests: every finite value of a format
// (from its codes, through the reference decoder) and the nearest of them to
// x (saturating round-to-nearest for inputs that are not ties).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"

namespace format_grid {

inline std::vector<double> finite_values(const mantissa::formats::Format& f) {
  std::vector<double> v;
  for (uint32_t c = 0; c < f.code_count(); ++c) {
    const double x = mantissa::formats::decode_f32(f, c);
    if (std::isfinite(x)) v.push_back(x);
  }
  return v;
}

inline double nearest(const std::vector<double>& grid, double x) {
  double best = grid[0];
  for (double g : grid)
    if (std::fabs(g - x) < std::fabs(best - x)) best = g;
  return best;
}

}  // namespace format_grid
