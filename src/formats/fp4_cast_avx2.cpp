// The FP4 casts' AVX2 pieces (fp4_cast_avx2.hpp): the AVX-512 band route of
// fp4_cast.cpp on 8 lanes, with vector masks for the tails and bytes stored
// through memcpy. Each function carries no target attribute itself (callers
// outside reach it through a declaration) and runs its MANTISSA_AVX2 body.
#include <algorithm>
#include <cstring>

#include "formats/fp4_cast_avx2.hpp"
#include "formats/fp4_lanes_avx2.hpp"
#include "mantissa/formats/fp4.hpp"

namespace mantissa::formats::detail::fp4_avx2 {
namespace {

MANTISSA_AVX2 float hmax(__m256 m) {
  __m128 v = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  v = _mm_max_ps(v, _mm_movehl_ps(v, v));
  v = _mm_max_ss(v, _mm_shuffle_ps(v, v, 1));
  return _mm_cvtss_f32(v);
}

MANTISSA_AVX2 float amax_impl(const float* x, int64_t n, bool* nonfinite) {
  __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 a = lanes8::abs(lanes8::load(x + i, n - i));  // lanes past n read as 0
    bad = _mm256_or_ps(bad, lanes8::nonfinite(a));
    m = _mm256_max_ps(m, a);
  }
  *nonfinite = _mm256_movemask_ps(bad) != 0;
  return hmax(m);
}

MANTISSA_AVX2 bool column_max_impl(const float* x, int64_t cols, int64_t r, float* out) {
  __m256 bad = _mm256_setzero_ps();
  for (int64_t j = 0; j < cols; j += 8) {
    __m256 m = _mm256_setzero_ps();
    for (int64_t i = 0; i < r; ++i) {
      const __m256 a = lanes8::abs(lanes8::load(x + i * cols + j, cols - j));
      bad = _mm256_or_ps(bad, lanes8::nonfinite(a));
      m = _mm256_max_ps(m, a);
    }
    lanes8::store(out + j, cols - j, m);
  }
  return _mm256_movemask_ps(bad) != 0;
}

MANTISSA_AVX2 void block_scales_impl(bool nv, float t, const float* amax, int64_t n, uint8_t* codes,
                                     float* factor, float* block) {
  for (int64_t j = 0; j < n; j += 8) {
    const int64_t cnt = std::min<int64_t>(8, n - j);
    const lanes8::Scales s = lanes8::scales8(nv, lanes8::load(amax + j, cnt), t);
    if (codes) lanes8::store_bytes(codes + j, cnt, lanes8::bytes8(s.code));
    lanes8::store(factor + j, cnt, s.factor);
    lanes8::store(block + j, cnt, s.block);
  }
}

// 8 tiles at a time: for tc 16 or 32 their maxima by hmax8.
MANTISSA_AVX2 void band_scales_impl(bool nv, float t, int64_t tc, const float* colmax, int64_t cols,
                                    uint8_t* codes, float* factor, float* block) {
  if (tc == 1) {
    block_scales_impl(nv, t, colmax, cols, codes, factor, block);
    return;
  }
  const int64_t across = (cols + tc - 1) / tc;
  for (int64_t t0 = 0; t0 < across; t0 += 8) {
    __m256 v[8];
    for (int64_t k = 0; k < 8; ++k) {
      const int64_t c0 = (t0 + k) * tc, c1 = std::min(cols, c0 + tc);
      v[k] = _mm256_setzero_ps();
      for (int64_t c = c0; c < c1; c += 8)
        v[k] = _mm256_max_ps(v[k], lanes8::load(colmax + c, c1 - c));
    }
    const lanes8::Scales s = lanes8::scales8(nv, lanes8::hmax8(v), t);
    const int64_t tiles = std::min<int64_t>(8, across - t0);
    if (codes) lanes8::store_bytes(codes + t0, tiles, lanes8::bytes8(s.code));
    alignas(32) float f[8], b[8];
    _mm256_store_ps(f, s.factor);
    _mm256_store_ps(b, s.block);
    for (int64_t k = 0; k < tiles; ++k) {
      const int64_t c0 = (t0 + k) * tc, c1 = std::min(cols, c0 + tc);
      for (int64_t c = c0; c < c1; c += 8) {
        lanes8::store(factor + c, c1 - c, _mm256_set1_ps(f[k]));
        lanes8::store(block + c, c1 - c, _mm256_set1_ps(b[k]));
      }
    }
  }
}

template <bool Nv, bool Stochastic>
MANTISSA_AVX2 void round_row_impl(bool headroom, DrawKey key, const float* x, const float* factor,
                                  const float* block, int64_t n, uint64_t first_index, RowOut out) {
  const bool run = Stochastic && lanes8::shares_upper(first_index, n);
  lanes8::DrawRun draws = lanes8::draw_run(key, first_index);
  for (int64_t j = 0; j < n; j += 8) {
    const int64_t cnt = std::min<int64_t>(8, n - j);
    __m256 xv = lanes8::load(x + j, cnt);
    // factor 1 past the end (a division by 0 there would raise nothing, but keep lanes tame)
    const __m256 f = _mm256_blendv_ps(_mm256_set1_ps(1.0f), lanes8::load(factor + j, cnt),
                                      _mm256_castsi256_ps(lanes8::first(cnt)));
    if (headroom) xv = _mm256_mul_ps(xv, _mm256_set1_ps(0.75f));
    const __m256 y = Nv ? _mm256_div_ps(xv, f) : _mm256_mul_ps(xv, f);
    __m256i d = _mm256_setzero_si256();
    if constexpr (Stochastic)
      d = run ? lanes8::draws8(draws) : lanes8::draws8(key, first_index + static_cast<uint64_t>(j));
    const lanes8::Rounded r = lanes8::round8<Stochastic>(y, d);
    if (out.codes && out.packed) {
      const uint32_t p = lanes8::pack8(r.codes);
      std::memcpy(out.codes + j / 2, &p, static_cast<size_t>(cnt / 2));
    } else if (out.codes) {
      lanes8::store_bytes(out.codes + j, cnt, lanes8::bytes8(r.codes));
    }
    if (out.decoded)
      lanes8::store16(out.decoded + j, cnt,
                      lanes8::top16(_mm256_mul_ps(r.value, lanes8::load(block + j, cnt))));
  }
}

// Codes 0..15 -> their signed E2M1 value, by a permute from two 8-entry halves.
MANTISSA_AVX2 void decode_row_impl(const uint8_t* codes, bool packed, const float* block, int64_t i,
                                   int64_t cols, uint16_t* out) {
  alignas(32) float table[16];
  for (int c = 0; c < 16; ++c) table[c] = e2m1_value(static_cast<uint8_t>(c));
  const __m256 pos = _mm256_load_ps(table), neg = _mm256_load_ps(table + 8);
  const uint8_t* row = codes + (packed ? i * cols / 2 : i * cols);
  for (int64_t j = 0; j < cols; j += 8) {
    const int64_t cnt = std::min<int64_t>(8, cols - j);
    uint64_t raw = 0;
    __m256i c;
    if (packed) {  // 4 bytes -> 8 lanes: the low nibble in even lanes, the high in odd ones
      std::memcpy(&raw, row + j / 2, static_cast<size_t>(cnt / 2));
      const __m256i w = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(static_cast<int>(raw)));
      c = _mm256_or_si256(_mm256_and_si256(w, _mm256_set1_epi64x(0xF)),
                          _mm256_slli_epi64(_mm256_srli_epi64(w, 4), 32));
    } else {
      std::memcpy(&raw, row + j, static_cast<size_t>(cnt));
      c = _mm256_and_si256(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(raw))),
                           _mm256_set1_epi32(0xF));
    }
    // bit 3 (the sign) picks the half; vpermps reads the low 3 bits
    const __m256 sel = _mm256_castsi256_ps(_mm256_slli_epi32(c, 28));
    const __m256 q =
        _mm256_blendv_ps(_mm256_permutevar8x32_ps(pos, c), _mm256_permutevar8x32_ps(neg, c), sel);
    lanes8::store16(out + j, cnt, lanes8::top16(_mm256_mul_ps(q, lanes8::load(block + j, cnt))));
  }
}

}  // namespace

float amax(const float* x, int64_t n, bool* nonfinite) { return amax_impl(x, n, nonfinite); }
bool column_max(const float* x, int64_t cols, int64_t r, float* out) {
  return column_max_impl(x, cols, r, out);
}
void block_scales(bool nv, float t, const float* amax, int64_t n, uint8_t* codes, float* factor,
                  float* block) {
  block_scales_impl(nv, t, amax, n, codes, factor, block);
}
void band_scales(bool nv, float t, int64_t tc, const float* colmax, int64_t cols, uint8_t* codes,
                 float* factor, float* block) {
  band_scales_impl(nv, t, tc, colmax, cols, codes, factor, block);
}
RoundRow round_row_for(bool nv, bool stochastic) {
  if (nv) return stochastic ? round_row_impl<true, true> : round_row_impl<true, false>;
  return stochastic ? round_row_impl<false, true> : round_row_impl<false, false>;
}
void decode_row(const uint8_t* codes, bool packed, const float* block, int64_t i, int64_t cols,
                uint16_t* out) {
  decode_row_impl(codes, packed, block, i, cols, out);
}

}  // namespace mantissa::formats::detail::fp4_avx2
