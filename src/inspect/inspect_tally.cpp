// A cast's figures (definitions in inspect.hpp), in double precision.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "mantissa/inspect/inspect.hpp"
#include "inspect/inspect_read.hpp"

namespace mantissa::inspect {

namespace {
double sqnr(double signal, double noise) {
  if (!(noise > 0)) return std::numeric_limits<double>::infinity();
  if (std::isinf(noise)) return -std::numeric_limits<double>::infinity();
  if (!(signal > 0)) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}
}  // namespace

double CastTally::sqnr_db() const { return sqnr(signal, noise); }

int CastTally::block_exp_median() const {
  int64_t seen = 0;
  const int64_t want = (blocks - 1) / 2;  // the lower median's index
  for (const auto& [e, count] : block_exp)
    if ((seen += count) > want) return e;
  return 0;
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

namespace {
template <class Ref, class Q>
void tiles(CastTally& t, const autograd::TileScales& s, Ref ref, Q q, int64_t max_values) {
  const int64_t down = (s.rows + s.tile_rows - 1) / s.tile_rows, across = (s.cols + s.tile_cols - 1) / s.tile_cols;
  const int64_t tiles = s.batch * down * across;
  if (static_cast<int64_t>(s.scale.size()) != tiles)
    throw std::logic_error("tally_tiles: " + std::to_string(s.scale.size()) + " scales for " + std::to_string(tiles) +
                           " tiles");
  const int64_t per_tile = s.tile_rows * s.tile_cols;
  const int64_t stride = sample_stride(tiles, max_values > 0 ? std::max<int64_t>(1, max_values / per_tile) : 0);
  for (int64_t k = 0; k < tiles; k += stride) {
    const int64_t m = k / (down * across), i = (k / across) % down, j = k % across;
    double signal = 0, noise = 0;
    bool nonzero = false;
    for (int64_t r = i * s.tile_rows; r < std::min(s.rows, (i + 1) * s.tile_rows); ++r)
      for (int64_t c = j * s.tile_cols; c < std::min(s.cols, (j + 1) * s.tile_cols); ++c) {
        const int64_t at = (m * s.rows + r) * s.cols + c;
        const double x = ref(at), v = q(at);
        if (!std::isfinite(x)) continue;
        nonzero |= x != 0;
        signal += x * x;
        noise += std::isfinite(v) ? (x - v) * (x - v) : std::numeric_limits<double>::infinity();
      }
    if (!nonzero) continue;
    const double scale = s.scale[static_cast<size_t>(k)];
    ++t.blocks;
    if (scale > 0) ++t.block_exp[std::ilogb(scale)];
    t.blocks_at_floor += scale <= s.floor;
    t.blocks_at_ceiling += scale >= s.ceiling;
    t.worst_block_sqnr_db = std::min(t.worst_block_sqnr_db, sqnr(signal, noise));
  }
}
}  // namespace

void tally_tiles(CastTally& t, const autograd::TileScales& s, const std::function<double(int64_t)>& ref,
                 const std::function<double(int64_t)>& q, int64_t max_values) {
  tiles(t, s, ref, q, max_values);
}

void tally_tiles(CastTally& t, const autograd::TileScales& s, const Tensor& ref, const Tensor& q, float q_scale,
                 int64_t max_values) {
  detail::with_reader(ref, 1.0f, [&](auto r) {
    detail::with_reader(q, q_scale, [&](auto v) { tiles(t, s, r, v, max_values); });
  });
}

}  // namespace mantissa::inspect
