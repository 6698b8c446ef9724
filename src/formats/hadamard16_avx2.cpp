// The 16-point Hadamard transform on AVX2 (hadamard16_internal.hpp), the
// bits of the scalar butterflies: along rows a vector holds 8 columns of one
// row and a group is 16 vectors; along columns a group is two vectors
// (lanes 0-7, 8-15), paired by in-lane permutes, a lane swap, then each other.
#include <algorithm>

#include "cpu/target.hpp"
#include "formats/hadamard16_internal.hpp"

namespace mantissa::formats::detail::hadamard_avx2 {
namespace {

// Lanes 0 .. n-1 set (n may be > 8), as vmaskmovps reads a mask.
MANTISSA_AVX2 inline __m256i first(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(n, 8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The 16 rotated rows of columns j .. j+7 of in[16, cols] (lanes past cols
// zero), before the x 1/4: signs, then the four butterfly stages.
MANTISSA_AVX2 inline void rows_rotate8(const float* in, int64_t cols, int64_t j, const float* s, __m256* v) {
  const bool full = cols - j >= 8;
  const __m256i m = first(cols - j);
  for (int r = 0; r < 16; ++r) {
    const float* p = in + r * cols + j;
    v[r] = _mm256_mul_ps(full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m), _mm256_set1_ps(s[r]));
  }
  for (int h = 1; h < 16; h *= 2)
    for (int i = 0; i < 16; i += 2 * h)
      for (int k = i; k < i + h; ++k) {
        const __m256 a = v[k], b = v[k + h];
        v[k] = _mm256_add_ps(a, b);
        v[k + h] = _mm256_sub_ps(a, b);
      }
}

// One group of 16 lanes (lo: 0-7, hi: 8-15), signs applied before, the
// x 1/4 after: lane k with bit h clear becomes v[k] + v[k + h], lane k + h
// becomes v[k] - v[k + h] (the partner minus itself), as the scalar butterfly.
struct Group {
  __m256 lo, hi;
};
MANTISSA_AVX2 inline __m256 stages3(__m256 v) {
  __m256 p = _mm256_permute_ps(v, 0xB1);  // distance 1
  v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xAA);
  p = _mm256_permute_ps(v, 0x4E);  // distance 2
  v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xCC);
  p = _mm256_permute2f128_ps(v, v, 0x01);  // distance 4
  return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xF0);
}
MANTISSA_AVX2 inline Group butterflies16(const float* x, __m256 s0, __m256 s1) {
  const __m256 lo = stages3(_mm256_mul_ps(_mm256_loadu_ps(x), s0));
  const __m256 hi = stages3(_mm256_mul_ps(_mm256_loadu_ps(x + 8), s1));
  const __m256 q = _mm256_set1_ps(0.25f);
  return {_mm256_mul_ps(_mm256_add_ps(lo, hi), q), _mm256_mul_ps(_mm256_sub_ps(lo, hi), q)};  // distance 8
}

// Running max of |v| and whether any lane is inf/NaN.
struct AbsMax {
  __m256 max, bad;
};
MANTISSA_AVX2 inline void add_abs(AbsMax& a, __m256 v) {
  const __m256 x = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  a.bad = _mm256_or_ps(a.bad, _mm256_cmp_ps(x, _mm256_set1_ps(3.4028234663852886e38f), _CMP_NLE_UQ));
  a.max = _mm256_max_ps(a.max, x);
}

MANTISSA_AVX2 void rows_group_impl(const float* in, float* out, int64_t cols, const float* s) {
  for (int64_t j = 0; j < cols; j += 8) {
    __m256 v[16];
    rows_rotate8(in, cols, j, s, v);
    const bool full = cols - j >= 8;
    const __m256i m = first(cols - j);
    for (int r = 0; r < 16; ++r) {
      const __m256 y = _mm256_mul_ps(v[r], _mm256_set1_ps(0.25f));
      if (full) _mm256_storeu_ps(out + r * cols + j, y);
      else _mm256_maskstore_ps(out + r * cols + j, m, y);
    }
  }
}

MANTISSA_AVX2 void cols_row_impl(const float* in, float* out, int64_t cols, const float* s) {
  const __m256 s0 = _mm256_loadu_ps(s), s1 = _mm256_loadu_ps(s + 8);
  const int64_t full = cols / 16 * 16;
  for (int64_t j = 0; j < full; j += 16) {
    const Group g = butterflies16(in + j, s0, s1);
    _mm256_storeu_ps(out + j, g.lo);
    _mm256_storeu_ps(out + j + 8, g.hi);
  }
  if (in != out) std::copy(in + full, in + cols, out + full);
}

MANTISSA_AVX2 float amax_impl(const float* in, int64_t rows, int64_t cols, int axis, const float* s,
                              bool* nonfinite) {
  AbsMax a{_mm256_setzero_ps(), _mm256_setzero_ps()};
  if (axis == 1 && rows == 16) {
    for (int64_t j = 0; j < cols; j += 8) {
      __m256 v[16];
      rows_rotate8(in, cols, j, s, v);  // lanes past cols are zero
      for (int r = 0; r < 16; ++r) add_abs(a, _mm256_mul_ps(v[r], _mm256_set1_ps(0.25f)));
    }
  } else {
    const __m256 s0 = _mm256_loadu_ps(s), s1 = _mm256_loadu_ps(s + 8);
    const int64_t full = axis == 2 ? cols / 16 * 16 : 0;
    for (int64_t i = 0; i < rows; ++i) {
      const float* row = in + i * cols;
      for (int64_t j = 0; j < full; j += 16) {
        const Group g = butterflies16(row + j, s0, s1);
        add_abs(a, g.lo);
        add_abs(a, g.hi);
      }
      for (int64_t j = full; j < cols; j += 8) add_abs(a, _mm256_maskload_ps(row + j, first(cols - j)));
    }
  }
  *nonfinite = _mm256_movemask_ps(a.bad) != 0;
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a.max), _mm256_extractf128_ps(a.max, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

}  // namespace

void rows_group(const float* in, float* out, int64_t cols, const float* signs) {
  rows_group_impl(in, out, cols, signs);
}
void cols_row(const float* in, float* out, int64_t cols, const float* signs) { cols_row_impl(in, out, cols, signs); }
float amax(const float* in, int64_t rows, int64_t cols, int axis, const float* signs, bool* nonfinite) {
  return amax_impl(in, rows, cols, axis, signs, nonfinite);
}

}  // namespace mantissa::formats::detail::hadamard_avx2
