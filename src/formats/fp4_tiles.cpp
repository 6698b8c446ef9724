// The FP4 vector cast's register paths (fp4_tiles.hpp): row tiles and
// column tiles, the shapes the recipes' activation and gradient casts use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "formats/fp4_internal.hpp"
#include "formats/fp4_lanes.hpp"
#include "formats/fp4_tiles.hpp"
#include "formats/hadamard16_internal.hpp"
#include "mantissa/formats/fp4.hpp"

namespace mantissa::formats {
namespace {

// Column tiles (16 x 1 or 32 x 1; rotated along rows or not): one band of
// tile rows, 16 columns at a time with the strip in L1. The strip's rows
// (each 16-row group rotated as hadamard16 does: a shorter last group is
// left as it is), their column maxima are the 16 tiles' maxima, the scales
// stay in registers, then the rounding. Rows [r0, r1) of x; true if any
// value seen is inf/NaN.
template <bool Nv, bool Stochastic>
MANTISSA_FP4_AVX512 bool column_tiles_band(const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, int64_t r0,
                                           int64_t r1, float t, uint8_t* scales, uint8_t* codes, uint16_t* decoded) {
  const bool headroom = spec.headroom && !Nv;
  const detail::DrawKey key = detail::draw_key(spec.seed);
  const bool small = static_cast<uint64_t>(rows * cols) <= (uint64_t{1} << 32) - 16;  // indices' upper halves 0
  __m512 strip[32];
  __mmask16 bad = 0;
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 m = lanes::first(cols - j);
    const int64_t h = r1 - r0;
    for (int64_t g = 0; g < h; g += 16) {
      if (spec.rht_signs && g + 16 <= h) {
        detail::rows_rotate(x + (r0 + g) * cols, cols, j, m, spec.rht_signs, strip + g);
        for (int r = 0; r < 16; ++r) strip[g + r] = _mm512_mul_ps(strip[g + r], _mm512_set1_ps(0.25f));
      } else {
        for (int64_t r = g; r < std::min(h, g + 16); ++r) strip[r] = _mm512_maskz_loadu_ps(m, x + (r0 + r) * cols + j);
      }
    }
    __m512 amax = _mm512_setzero_ps();
    for (int64_t r = 0; r < h; ++r) {
      const __m512 a = _mm512_abs_ps(strip[r]);
      bad |= _mm512_mask_cmp_ps_mask(m, a, _mm512_set1_ps(3.4028234663852886e38f), _CMP_NLE_UQ);
      amax = _mm512_max_ps(amax, a);
    }
    const lanes::Scales s = lanes::scales16(Nv, amax, t);
    if (scales) _mm_mask_storeu_epi8(scales + j, m, _mm512_cvtepi32_epi8(s.code));
    for (int64_t r = 0; r < h; ++r) {
      const int64_t k = (r0 + r) * cols + j;  // the element index of lane 0
      __m512 v = strip[r];
      if (headroom) v = _mm512_mul_ps(v, _mm512_set1_ps(0.75f));
      const __m512 y = Nv ? _mm512_div_ps(v, s.factor) : _mm512_mul_ps(v, s.factor);
      __m512i d = _mm512_setzero_si512();
      if constexpr (Stochastic) {
        if (small) {
          lanes::DrawRun run = lanes::draw_run(key, static_cast<uint64_t>(k));
          d = lanes::draws16(run);
        } else {
          d = lanes::draws16(key, static_cast<uint64_t>(k));
        }
      }
      const lanes::Rounded q = lanes::round16<Stochastic>(y, d);
      if (codes && spec.packed)
        _mm_mask_storeu_epi8(codes + k / 2, lanes::first(std::min<int64_t>(16, cols - j) / 2), lanes::pack16(q.codes));
      else if (codes)
        _mm_mask_storeu_epi8(codes + k, m, _mm512_cvtepi32_epi8(q.codes));
      if (decoded)
        _mm256_mask_storeu_epi16(decoded + k, m,
                                 _mm512_cvtepi32_epi16(_mm512_srli_epi32(
                                     _mm512_castps_si512(_mm512_mul_ps(q.value, s.block)), 16)));
    }
  }
  return bad != 0;
}

// Row tiles (1 x 16 or 1 x 32; rotated along columns or not): row i of x,
// 16 tiles at a time. Their values (each full 16-column group rotated as
// hadamard16 does; a shorter last one left as it is) in registers, the
// tiles' maxima by hmax16, the scales in registers, each vector's factor and
// block scale picked out by a permute, then the rounding. True if any value
// seen is inf/NaN.
template <bool Nv, bool Stochastic>
MANTISSA_FP4_AVX512 bool row_tiles(const Fp4Spec& spec, const float* x, int64_t cols, int64_t i, float t,
                                   uint8_t* scales, uint8_t* codes, uint16_t* decoded) {
  const bool headroom = spec.headroom && !Nv;
  const detail::DrawKey key = detail::draw_key(spec.seed);
  const int64_t per_tile = spec.tile_cols / 16, first_index = i * cols;
  const bool run = lanes::shares_upper(static_cast<uint64_t>(first_index), cols);
  lanes::DrawRun draws = lanes::draw_run(key, static_cast<uint64_t>(first_index));
  const __m512 signs = spec.rht_signs ? _mm512_loadu_ps(spec.rht_signs) : _mm512_setzero_ps();
  const float* row = x + first_index;
  __mmask16 bad = 0;
  __m512 v[32];
  for (int64_t j0 = 0; j0 < cols; j0 += 16 * spec.tile_cols) {
    const int64_t vecs = std::min<int64_t>(16 * per_tile, (cols - j0 + 15) / 16);
    for (int64_t q = 0; q < vecs; ++q) {
      const int64_t j = j0 + 16 * q;
      v[q] = _mm512_maskz_loadu_ps(lanes::first(cols - j), row + j);
      if (spec.rht_signs && cols - j >= 16)
        v[q] = _mm512_mul_ps(detail::butterflies16(_mm512_mul_ps(v[q], signs)), _mm512_set1_ps(0.25f));
      bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(v[q]), _mm512_set1_ps(3.4028234663852886e38f), _CMP_NLE_UQ);
    }
    __m512 tile[16];
    for (int64_t k = 0; k < 16; ++k) {
      tile[k] = _mm512_setzero_ps();
      for (int64_t q = k * per_tile; q < std::min(vecs, k * per_tile + per_tile); ++q)
        tile[k] = _mm512_max_ps(tile[k], _mm512_abs_ps(v[q]));
    }
    const lanes::Scales s = lanes::scales16(Nv, lanes::hmax16(tile), t);
    const int64_t tiles = (vecs + per_tile - 1) / per_tile;
    if (scales) _mm_mask_storeu_epi8(scales + j0 / spec.tile_cols, lanes::first(tiles), _mm512_cvtepi32_epi8(s.code));
    for (int64_t q = 0; q < vecs; ++q) {
      const int64_t j = j0 + 16 * q;
      const __mmask16 m = lanes::first(cols - j);
      const __m512i k = _mm512_set1_epi32(static_cast<int>(q / per_tile));
      __m512 xv = v[q];
      if (headroom) xv = _mm512_mul_ps(xv, _mm512_set1_ps(0.75f));
      const __m512 f = _mm512_permutexvar_ps(k, s.factor);
      const __m512 y = Nv ? _mm512_div_ps(xv, f) : _mm512_mul_ps(xv, f);
      __m512i d = _mm512_setzero_si512();
      if constexpr (Stochastic)
        d = run ? lanes::draws16(draws) : lanes::draws16(key, static_cast<uint64_t>(first_index + j));
      const lanes::Rounded r = lanes::round16<Stochastic>(y, d);
      if (codes && spec.packed)
        _mm_mask_storeu_epi8(codes + (first_index + j) / 2, lanes::first(std::min<int64_t>(16, cols - j) / 2),
                             lanes::pack16(r.codes));
      else if (codes)
        _mm_mask_storeu_epi8(codes + first_index + j, m, _mm512_cvtepi32_epi8(r.codes));
      if (decoded) {
        const __m512 dv = _mm512_mul_ps(r.value, _mm512_permutexvar_ps(k, s.block));
        _mm256_mask_storeu_epi16(decoded + first_index + j, m,
                                 _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(dv), 16)));
      }
    }
  }
  return bad != 0;
}

}  // namespace

namespace detail {

ColumnTilesBand column_tiles_band_for(bool nv, bool stochastic) {
  if (nv) return stochastic ? column_tiles_band<true, true> : column_tiles_band<true, false>;
  return stochastic ? column_tiles_band<false, true> : column_tiles_band<false, false>;
}

RowTiles row_tiles_for(bool nv, bool stochastic) {
  if (nv) return stochastic ? row_tiles<true, true> : row_tiles<true, false>;
  return stochastic ? row_tiles<false, true> : row_tiles<false, false>;
}

}  // namespace detail
}  // namespace mantissa::formats
