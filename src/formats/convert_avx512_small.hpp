// Internal to the AVX-512 converters: narrow floating formats (FP8, FP6, FP4:
// at most 5 exponent bits, at most 8 mantissa bits) rounded through the
// hardware fp32 -> fp16 converter, 32 lanes at a time.
//
// Why it is exact: the input is first multiplied by 2^shift so the target's
// minimum normal lands on fp16's (exact: a power of two, and every value the
// target can tell apart stays an fp32 normal). vcvtps2ph then rounds toward
// zero, and a lane whose fp16 value is not exactly the input gets its lowest
// bit set: round-to-odd. An intermediate rounded to odd with at least two
// more bits than the target rounds on to the target exactly as the input
// would have, in every deterministic mode (Boldo & Melquiond, "Emulation of
// FMA and correctly rounded sums: proved algorithms using rounding to odd",
// 2008). The target's codes are then the fp16 bits shifted right by
// 10 - M with the target's rounding on the dropped bits, because after the
// scaling both formats share exponent field, bias and subnormal layout.
#pragma once

#include "formats/convert_avx512_util.hpp"
#include "formats/convert_plan.hpp"

namespace mantissa::formats::detail {

// The power of two that maps the target's min normal onto fp16's (2^-14).
inline int small_route_shift(const QuantPlan& p) { return -14 - p.emin; }

MANTISSA_AVX512 inline __m512i by_sign16(__mmask32 neg, const uint32_t (&codes)[2]) {
  return _mm512_mask_mov_epi16(_mm512_set1_epi16(static_cast<short>(codes[0])), neg,
                               _mm512_set1_epi16(static_cast<short>(codes[1])));
}

// Codes (in 16-bit lanes) of the 32 values lo[0..15], hi[0..15], each
// multiplied by `scale` (a power of two: 2^small_route_shift, times the
// block scale for MX) and, with kTwoFactors, by `scale2`: a second factor
// for block scales whose product would leave fp32's normal range. Use the
// round32_small overloads below.
template <bool kTwoFactors>
MANTISSA_AVX512 inline __m512i round32_small_impl(const QuantPlan& p, __m512 lo, __m512 hi, __m512 scale,
                                                  __m512 scale2) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i inf_bits = _mm512_set1_epi32(0x7F800000);
  const __m512i alo = _mm512_and_si512(_mm512_castps_si512(lo), abs_mask);
  const __m512i ahi = _mm512_and_si512(_mm512_castps_si512(hi), abs_mask);
  // Any inf/NaN among the 32 (one test; the exact lanes only when there are).
  const bool any_special = _mm512_cmpge_epu32_mask(_mm512_max_epu32(alo, ahi), inf_bits) != 0;

  __m512 slo = _mm512_mul_ps(lo, scale);
  __m512 shi = _mm512_mul_ps(hi, scale);
  if constexpr (kTwoFactors) {
    slo = _mm512_mul_ps(slo, scale2);
    shi = _mm512_mul_ps(shi, scale2);
  }
  const __m256i hlo = _mm512_cvtps_ph(slo, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256i hhi = _mm512_cvtps_ph(shi, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(hlo), hhi, 1);
  // Inexact: the fp16 value differs from the scaled input, or the scaling
  // itself underflowed a non-zero input to zero (then far below the target).
  const __mmask32 nonzero_in = static_cast<__mmask32>(_mm512_test_epi32_mask(alo, alo)) |
                               (static_cast<__mmask32>(_mm512_test_epi32_mask(ahi, ahi)) << 16);
  const __mmask32 inexact =
      static_cast<__mmask32>(_mm512_cmp_ps_mask(_mm512_cvtph_ps(hlo), slo, _CMP_NEQ_UQ)) |
      (static_cast<__mmask32>(_mm512_cmp_ps_mask(_mm512_cvtph_ps(hhi), shi, _CMP_NEQ_UQ)) << 16) |
      (nonzero_in & ~_mm512_test_epi16_mask(h, _mm512_set1_epi16(0x7FFF)));

  const __mmask32 neg = _mm512_movepi16_mask(h);
  const __m512i one = _mm512_set1_epi16(1);
  __m512i mag = _mm512_and_si512(h, _mm512_set1_epi16(0x7FFF));
  mag = _mm512_mask_mov_epi16(mag, inexact, _mm512_or_si512(mag, one));                      // round to odd

  const unsigned d = static_cast<unsigned>(10 - p.man_bits);
  const __m512i kept = _mm512_srli_epi16(mag, d);
  const __m512i rem = _mm512_and_si512(mag, _mm512_set1_epi16(static_cast<short>((1 << d) - 1)));
  const __m512i half = _mm512_set1_epi16(static_cast<short>(1 << (d - 1)));
  const __mmask32 dropped = _mm512_test_epi16_mask(rem, rem);
  __mmask32 up = 0;
  switch (p.opt.mode) {
    case Round::nearest_even:
      up = _mm512_cmpgt_epu16_mask(rem, half) |
           (_mm512_cmpeq_epi16_mask(rem, half) & _mm512_test_epi16_mask(kept, one));
      break;
    case Round::nearest_away: up = _mm512_cmpge_epu16_mask(rem, half); break;
    case Round::toward_zero: up = 0; break;
    case Round::up: up = dropped & ~neg; break;
    case Round::down: up = dropped & neg; break;
    case Round::stochastic: break;  // excluded by small_route
  }
  __m512i out = _mm512_mask_add_epi16(kept, up, kept, one);
  if (p.opt.flush_subnormals)
    out = _mm512_mask_mov_epi16(out, _mm512_cmplt_epu16_mask(out, _mm512_set1_epi16(static_cast<short>(p.min_normal_mag))),
                                _mm512_setzero_si512());
  const __mmask32 overflow = _mm512_cmpgt_epu16_mask(out, _mm512_set1_epi16(static_cast<short>(p.max_mag)));
  __mmask32 signed_lanes = neg;
  if (!p.negative_zero) signed_lanes &= _mm512_test_epi16_mask(out, out);
  out = _mm512_mask_mov_epi16(out, signed_lanes, _mm512_or_si512(out, _mm512_set1_epi16(static_cast<short>(p.sign_bit))));
  out = _mm512_mask_mov_epi16(out, overflow, by_sign16(neg, p.overflow_code));
  if (any_special) {  // every inf/NaN lane is overwritten here, whatever the steps above gave it
    const __mmask32 special = static_cast<__mmask32>(_mm512_cmpge_epu32_mask(alo, inf_bits)) |
                              (static_cast<__mmask32>(_mm512_cmpge_epu32_mask(ahi, inf_bits)) << 16);
    const __mmask32 nan = static_cast<__mmask32>(_mm512_cmpgt_epu32_mask(alo, inf_bits)) |
                          (static_cast<__mmask32>(_mm512_cmpgt_epu32_mask(ahi, inf_bits)) << 16);
    // The sign of a NaN lane comes from the input, not from vcvtps2ph.
    const __mmask32 in_neg = static_cast<__mmask32>(_mm512_movepi32_mask(_mm512_castps_si512(lo))) |
                             (static_cast<__mmask32>(_mm512_movepi32_mask(_mm512_castps_si512(hi))) << 16);
    out = _mm512_mask_mov_epi16(out, special & ~nan, by_sign16(in_neg, p.inf_code));
    out = _mm512_mask_mov_epi16(out, nan, by_sign16(in_neg, p.nan_code));
  }
  return out;
}

MANTISSA_AVX512 inline __m512i round32_small(const QuantPlan& p, __m512 lo, __m512 hi, __m512 scale) {
  return round32_small_impl<false>(p, lo, hi, scale, scale);
}

MANTISSA_AVX512 inline __m512i round32_small(const QuantPlan& p, __m512 lo, __m512 hi, __m512 scale, __m512 scale2) {
  return round32_small_impl<true>(p, lo, hi, scale, scale2);
}

}  // namespace mantissa::formats::detail
