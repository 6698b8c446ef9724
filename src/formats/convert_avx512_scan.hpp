// Internal to the AVX-512 cast kernels (scaled_copy.cpp, scaled_cast.cpp):
// the running scan of an fp32 input that a cast needs besides its codes
// (largest magnitude, any inf/NaN, how many finite values the scaling takes
// past the format's max), 16 lanes at a time.
#pragma once

#include <bit>
#include <limits>

#include "formats/convert_avx512_util.hpp"

namespace mantissa::formats::detail {

struct Lanes16 {
  __m512 m;
  __mmask16 bad = 0;
  int64_t beyond = 0;
};

// Adds the lanes of v in `lanes` to st and returns v x vmult (every lane).
// vmaxps(a, m) returns m when a is NaN, as the scalar a > m ? a : m does, so
// NaNs never enter the running max.
MANTISSA_AVX512 inline __m512 scan16(Lanes16& st, __m512 v, __mmask16 lanes, __m512 vmult, __m512 vlimit) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), abs_mask));
  const __m512 s = _mm512_mul_ps(v, vmult);
  st.m = _mm512_max_ps(a, st.m);
  const __mmask16 finite =
      _mm512_cmp_ps_mask(a, _mm512_set1_ps(std::numeric_limits<float>::max()), _CMP_LE_OQ) & lanes;
  st.bad = static_cast<__mmask16>(st.bad | (lanes & ~finite));
  const __m512 as = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(s), abs_mask));
  st.beyond += std::popcount(static_cast<unsigned>(_mm512_mask_cmp_ps_mask(finite, as, vlimit, _CMP_GT_OQ)));
  return s;
}

}  // namespace mantissa::formats::detail
