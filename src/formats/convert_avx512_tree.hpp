// Internal to the AVX-512 block kernels (convert_mx.cpp, scaled_cast.cpp):
// the per-block maxima of 16 blocks in one register.
#pragma once

#include "formats/convert_avx512_util.hpp"

namespace mantissa::formats::detail {

// Lane j of the result: the unsigned maximum over the 16 lanes of v[j]. With
// v[j] the |x| bits of block j folded to one register, these are the blocks'
// amaxes (|x| bit patterns order like the values, and >= inf's pattern means
// inf or NaN). Each level of the tree merges two registers and halves the
// lanes that each block occupies.
MANTISSA_AVX512 inline __m512i max_across16(const __m512i (&v)[16]) {
  // 16 lanes per block -> 8: 128-bit quarters {a0 a1 b0 b1} vs {a2 a3 b2 b3}.
  __m512i w[8];
  for (int j = 0; j < 8; ++j)
    w[j] = _mm512_max_epu32(_mm512_shuffle_i64x2(v[2 * j], v[2 * j + 1], 0x44),
                            _mm512_shuffle_i64x2(v[2 * j], v[2 * j + 1], 0xEE));
  // 8 -> 4: quarter q of the result holds block q of the four merged.
  __m512i x[4];
  for (int j = 0; j < 4; ++j)
    x[j] = _mm512_max_epu32(_mm512_shuffle_i64x2(w[2 * j], w[2 * j + 1], 0x88),
                            _mm512_shuffle_i64x2(w[2 * j], w[2 * j + 1], 0xDD));
  // 4 -> 2: in quarter q, lanes {0,1} block q and {2,3} block 4 + q of the eight.
  __m512i y[2];
  for (int j = 0; j < 2; ++j)
    y[j] = _mm512_max_epu32(_mm512_unpacklo_epi64(x[2 * j], x[2 * j + 1]),
                            _mm512_unpackhi_epi64(x[2 * j], x[2 * j + 1]));
  // 2 -> 1: lane 4q + r holds block 4r + q; the permute puts block j in lane j.
  const __m512 a = _mm512_castsi512_ps(y[0]), b = _mm512_castsi512_ps(y[1]);
  const __m512i z = _mm512_max_epu32(_mm512_castps_si512(_mm512_shuffle_ps(a, b, 0x88)),
                                     _mm512_castps_si512(_mm512_shuffle_ps(a, b, 0xDD)));
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_permutexvar_epi32(order, z);
}

}  // namespace mantissa::formats::detail
