// Internal to the AVX2 converters: narrow floating formats (FP8, FP6, FP4)
// rounded through F16C's fp32 -> fp16 converter, 16 lanes at a time: the
// 2 x 8-lane form of convert_avx512_small.hpp, whose header says why it is
// exact (scale to fp16's exponent range, convert toward zero, set the lowest
// bit of inexact lanes: round-to-odd, then round the dropped bits to the
// target with the plan's mode).
#pragma once

#include "formats/convert_avx2_util.hpp"
#include "formats/convert_plan.hpp"

namespace mantissa::formats::detail::avx2 {

MANTISSA_AVX2 inline __m256i by_sign16(__m256i neg, const uint32_t (&codes)[2]) {
  return blend(_mm256_set1_epi16(static_cast<short>(codes[0])), _mm256_set1_epi16(static_cast<short>(codes[1])), neg);
}

// Codes (ordered 16-bit lanes) of the 16 values lo[0..7], hi[0..7], each
// multiplied by `scale` (a power of two: 2^small_route_shift, times the
// block scale for MX) and, with kTwoFactors, by `scale2` (a second factor
// for block scales whose product would leave fp32's normal range).
template <bool kTwoFactors = false>
MANTISSA_AVX2 inline __m256i round16_small(const QuantPlan& p, __m256 lo, __m256 hi, __m256 scale,
                                           __m256 scale2) {
  const __m256i abs_mask = set1(0x7FFFFFFF);
  const __m256i inf_bits = set1(0x7F800000);
  const __m256i alo = _mm256_and_si256(_mm256_castps_si256(lo), abs_mask);
  const __m256i ahi = _mm256_and_si256(_mm256_castps_si256(hi), abs_mask);
  // |x| bits are below 2^31: signed compares order them.
  const bool any_special = any(_mm256_cmpgt_epi32(_mm256_max_epi32(alo, ahi), _mm256_sub_epi32(inf_bits, _mm256_set1_epi32(1))));

  __m256 slo = _mm256_mul_ps(lo, scale);
  __m256 shi = _mm256_mul_ps(hi, scale);
  if constexpr (kTwoFactors) {
    slo = _mm256_mul_ps(slo, scale2);
    shi = _mm256_mul_ps(shi, scale2);
  }
  const __m128i hlo = _mm256_cvtps_ph(slo, _MM_FROUND_TO_ZERO);
  const __m128i hhi = _mm256_cvtps_ph(shi, _MM_FROUND_TO_ZERO);
  const __m256i h = _mm256_set_m128i(hhi, hlo);
  // Inexact: the fp16 value differs from the scaled input, or the scaling
  // itself underflowed a non-zero input to zero (then far below the target).
  const __m256i ne_lo = _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtph_ps(hlo), slo, _CMP_NEQ_UQ));
  const __m256i ne_hi = _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtph_ps(hhi), shi, _CMP_NEQ_UQ));
  const __m256i nonzero_in = not_mask(pack_mask16(is_zero32(alo), is_zero32(ahi)));
  const __m256i one = _mm256_set1_epi16(1);
  __m256i mag = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
  const __m256i h_zero = _mm256_cmpeq_epi16(mag, _mm256_setzero_si256());
  const __m256i inexact = _mm256_or_si256(pack_mask16(ne_lo, ne_hi), _mm256_and_si256(nonzero_in, h_zero));
  const __m256i neg = _mm256_srai_epi16(h, 15);
  mag = _mm256_or_si256(mag, _mm256_and_si256(inexact, one));  // round to odd

  const int d = 10 - p.man_bits;
  const __m256i kept = _mm256_srli_epi16(mag, d);
  const __m256i rem = _mm256_and_si256(mag, _mm256_set1_epi16(static_cast<short>((1 << d) - 1)));
  const __m256i half = _mm256_set1_epi16(static_cast<short>(1 << (d - 1)));
  const __m256i dropped = not_mask(_mm256_cmpeq_epi16(rem, _mm256_setzero_si256()));
  __m256i up = _mm256_setzero_si256();  // all-ones lanes round up
  switch (p.opt.mode) {
    case Round::nearest_even:
      up = _mm256_or_si256(_mm256_cmpgt_epi16(rem, half),
                           _mm256_and_si256(_mm256_cmpeq_epi16(rem, half), _mm256_cmpeq_epi16(_mm256_and_si256(kept, one), one)));
      break;
    case Round::nearest_away: up = not_mask(_mm256_cmpgt_epi16(half, rem)); break;
    case Round::toward_zero: break;
    case Round::up: up = _mm256_andnot_si256(neg, dropped); break;
    case Round::down: up = _mm256_and_si256(dropped, neg); break;
    case Round::stochastic: break;  // excluded by small_route
  }
  __m256i out = _mm256_sub_epi16(kept, up);
  if (p.opt.flush_subnormals)
    out = _mm256_andnot_si256(_mm256_cmpgt_epi16(_mm256_set1_epi16(static_cast<short>(p.min_normal_mag)), out), out);
  const __m256i overflow = _mm256_cmpgt_epi16(out, _mm256_set1_epi16(static_cast<short>(p.max_mag)));
  __m256i signed_lanes = neg;
  if (!p.negative_zero) signed_lanes = _mm256_andnot_si256(_mm256_cmpeq_epi16(out, _mm256_setzero_si256()), neg);
  out = _mm256_or_si256(out, _mm256_and_si256(signed_lanes, _mm256_set1_epi16(static_cast<short>(p.sign_bit))));
  out = blend(out, by_sign16(neg, p.overflow_code), overflow);
  if (any_special) {  // every inf/NaN lane is overwritten here, whatever the steps above gave it
    const __m256i special =
        pack_mask16(_mm256_cmpgt_epi32(alo, _mm256_sub_epi32(inf_bits, _mm256_set1_epi32(1))),
                    _mm256_cmpgt_epi32(ahi, _mm256_sub_epi32(inf_bits, _mm256_set1_epi32(1))));
    const __m256i nan = pack_mask16(_mm256_cmpgt_epi32(alo, inf_bits), _mm256_cmpgt_epi32(ahi, inf_bits));
    // The sign of a NaN lane comes from the input, not from vcvtps2ph.
    const __m256i in_neg = pack_mask16(_mm256_srai_epi32(_mm256_castps_si256(lo), 31),
                                       _mm256_srai_epi32(_mm256_castps_si256(hi), 31));
    out = blend(out, by_sign16(in_neg, p.inf_code), _mm256_andnot_si256(nan, special));
    out = blend(out, by_sign16(in_neg, p.nan_code), nan);
  }
  return out;
}

}  // namespace mantissa::formats::detail::avx2
