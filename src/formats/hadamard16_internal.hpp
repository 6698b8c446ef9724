// The 16-point transform on the calling thread (formats/hadamard16.hpp), its
// 16-lane pieces, for the FP4 casts that rotate in their own threads and
// registers, and its AVX2 path.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace mantissa::formats::detail {

// As hadamard16, without threads; axis 1 or 2 (not checked).
void hadamard16_serial(const float* in, float* out, int64_t rows, int64_t cols, int axis, const float* signs);
// The largest |value| of hadamard16(in) over rows [0, rows) (at most 16, a
// whole group along rows or a shorter last one), rotated in registers and not
// stored; nonfinite: any of them inf or NaN.
float hadamard16_amax(const float* in, int64_t rows, int64_t cols, int axis, const float* signs, bool* nonfinite);

// The AVX2 path (hadamard16_avx2.cpp), the bits of the scalar one: 16 rows
// of in[., cols] along rows; one row along columns (a last group shorter
// than 16 copied as it is); hadamard16_amax for rows <= 16.
namespace hadamard_avx2 {
void rows_group(const float* in, float* out, int64_t cols, const float* signs);
void cols_row(const float* in, float* out, int64_t cols, const float* signs);
float amax(const float* in, int64_t rows, int64_t cols, int axis, const float* signs, bool* nonfinite);
}  // namespace hadamard_avx2

// The 16 rotated rows of columns j .. j+15 of in[16, cols] (lanes outside m
// zero), before the x 1/4: signs, then the four butterfly stages.
__attribute__((target("avx512f"))) inline void rows_rotate(const float* in, int64_t cols, int64_t j, __mmask16 m,
                                                           const float* s, __m512* v) {
  for (int r = 0; r < 16; ++r) v[r] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, in + r * cols + j), _mm512_set1_ps(s[r]));
  for (int h = 1; h < 16; h *= 2)
    for (int i = 0; i < 16; i += 2 * h)
      for (int k = i; k < i + h; ++k) {
        const __m512 a = v[k], b = v[k + h];
        v[k] = _mm512_add_ps(a, b);
        v[k + h] = _mm512_sub_ps(a, b);
      }
}

// Along columns: 16 lanes are a group. Lane k with bit h clear becomes v[k] +
// v[k + h]; lane k + h becomes v[k] - v[k + h] (the partner minus itself),
// as the scalar butterfly; signs applied before, the x 1/4 after.
__attribute__((target("avx512f"))) inline __m512 butterflies16(__m512 v) {
  __m512 p = _mm512_permute_ps(v, 0xB1);  // distance 1
  v = _mm512_mask_blend_ps(0xAAAA, _mm512_add_ps(v, p), _mm512_sub_ps(p, v));
  p = _mm512_permute_ps(v, 0x4E);  // distance 2
  v = _mm512_mask_blend_ps(0xCCCC, _mm512_add_ps(v, p), _mm512_sub_ps(p, v));
  p = _mm512_shuffle_f32x4(v, v, 0xB1);  // distance 4
  v = _mm512_mask_blend_ps(0xF0F0, _mm512_add_ps(v, p), _mm512_sub_ps(p, v));
  p = _mm512_shuffle_f32x4(v, v, 0x4E);  // distance 8
  return _mm512_mask_blend_ps(0xFF00, _mm512_add_ps(v, p), _mm512_sub_ps(p, v));
}

}  // namespace mantissa::formats::detail
