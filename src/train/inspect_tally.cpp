// A cast's figures (definitions in inspect.hpp), in double precision.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>

#include "mantissa/train/inspect.hpp"

namespace mantissa::train {

double CastTally::sqnr_db() const {
  if (!(noise > 0)) return std::numeric_limits<double>::infinity();
  if (std::isinf(noise)) return -std::numeric_limits<double>::infinity();
  if (!(signal > 0)) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

int64_t sample_stride(int64_t n, int64_t max_values) {
  if (max_values <= 0 || n <= max_values) return 1;
  return (n + max_values - 1) / max_values;
}

void tally(CastTally& t, const float* ref, const float* q, int64_t n, int64_t stride, double limit,
           const float* limit_per_elem) {
  double signal = 0, noise = 0, amax = t.amax;
  int64_t values = 0, nonzero = 0, flushed = 0, saturated = 0;
  for (int64_t i = 0; i < n; i += stride) {
    const double r = ref[i], v = q[i];
    if (!std::isfinite(r)) continue;
    ++values;
    const double a = std::fabs(r);
    amax = std::max(amax, a);
    const double lim = limit_per_elem ? static_cast<double>(limit_per_elem[i]) : limit;
    if (a > lim || !std::isfinite(v)) ++saturated;
    signal += r * r;
    noise += std::isfinite(v) ? (r - v) * (r - v) : std::numeric_limits<double>::infinity();
    if (r != 0) {
      ++nonzero;
      flushed += v == 0;
      const uint32_t biased = (std::bit_cast<uint32_t>(ref[i]) >> 23) & 0xff;  // r is a finite float
      const int e = std::clamp(biased ? static_cast<int>(biased) - 127 : std::ilogb(a), CastTally::kExpLo,
                               CastTally::kExpLo + CastTally::kExpBins - 1);
      ++t.exp_hist[static_cast<size_t>(e - CastTally::kExpLo)];
    }
  }
  t.signal += signal;
  t.noise += noise;
  t.values += values;
  t.nonzero += nonzero;
  t.flushed += flushed;
  t.saturated += saturated;
  t.amax = amax;
  ++t.casts;
}

}  // namespace mantissa::train
