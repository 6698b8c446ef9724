// Brute-force casts for the inspector's tests: every finite value of a format
// (from its codes, through the reference decoder) and the nearest of them to
// x (saturating round-to-nearest for inputs that are not ties), and the
// magnitude above which a value saturates.
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

// Above this a value rounds beyond the largest finite value g1 (saturates):
// g1 plus half its distance to the next lower value.
inline double saturation_threshold(const std::vector<double>& grid) {
  double g1 = 0, g2 = 0;
  for (double g : grid)
    if (g > g1) g2 = g1, g1 = g;
    else if (g > g2 && g < g1) g2 = g;
  return g1 + (g1 - g2) / 2;
}

}  // namespace format_grid
