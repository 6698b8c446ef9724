// Internal to the AVX-512 converters: the integer-arithmetic rounder of 16
// fp32 lanes into any floating format a QuantPlan describes (shared by the
// bulk kernels and the MX block kernel).
#pragma once

#include "formats/convert_avx512_util.hpp"
#include "formats/convert_plan.hpp"

namespace mantissa::formats::detail {

// Rounds 16 fp32 lanes into codes of a floating format (see QuantPlan):
// the fp32 significand is shifted right by the number of bits the target
// cannot hold, the dropped bits decide the rounding, and the carry of a
// round-up propagates into the exponent field by itself.
//
// kScaled: the value rounded is x * 2^scale_exp (MX blocks), done on the
// exponent so it is exact; fp32 subnormals are first normalised (x * 2^24 is
// exact) because a scaled one may land in the target's normal range.
template <bool kScaled = false>
MANTISSA_AVX512 inline __m512i round16(const QuantPlan& p, __m512i x, __m512i random, int scale_exp = 0) {
  const __m512i one = _mm512_set1_epi32(1);
  const __mmask16 neg = _mm512_movepi32_mask(x);
  __m512i a = _mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF));
  __m512i e_offset = _mm512_set1_epi32(scale_exp);
  if constexpr (kScaled) {
    const __mmask16 sub = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x800000));
    a = _mm512_mask_mov_epi32(a, sub, _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(0x1p24f))));
    e_offset = _mm512_mask_sub_epi32(e_offset, sub, e_offset, _mm512_set1_epi32(24));
  }
  const __m512i e32 = _mm512_srli_epi32(a, 23);
  const __m512i m32 = _mm512_and_si512(a, _mm512_set1_epi32(0x7FFFFF));
  const __mmask16 special = _mm512_cmpeq_epi32_mask(e32, _mm512_set1_epi32(255));
  const __mmask16 normal = _mm512_test_epi32_mask(e32, e32);
  const __m512i sig = _mm512_mask_or_epi32(m32, normal, m32, _mm512_set1_epi32(0x800000));
  __m512i e_eff = _mm512_max_epi32(e32, one);
  if constexpr (kScaled) e_eff = _mm512_add_epi32(e_eff, e_offset);
  // Bits below the target's subnormal quantum: (23 - M) + max(emin - e, 0).
  const __m512i below_emin = _mm512_max_epi32(_mm512_sub_epi32(_mm512_set1_epi32(p.emin + 127), e_eff),
                                              _mm512_setzero_si512());
  // Shifts of 25 or more drop every bit alike; 31 keeps the shift counts below
  // 32, while stochastic rounding weighs the remainder with the true shift.
  const __m512i sh_true = _mm512_add_epi32(below_emin, _mm512_set1_epi32(23 - p.man_bits));
  const __m512i sh = _mm512_min_epi32(sh_true, _mm512_set1_epi32(31));
  __m512i exp_field = _mm512_max_epi32(_mm512_sub_epi32(e_eff, _mm512_set1_epi32(p.emin + 127)),
                                       _mm512_setzero_si512());
  // A zero has no exponent: scaling must not give it one.
  if constexpr (kScaled) exp_field = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(sig, sig), exp_field);
  const __m512i kept = _mm512_srlv_epi32(sig, sh);
  const __m512i unit = _mm512_sllv_epi32(one, sh);
  const __m512i rem = _mm512_and_si512(sig, _mm512_sub_epi32(unit, one));
  const __m512i half = _mm512_srli_epi32(unit, 1);
  __m512i mag = _mm512_add_epi32(_mm512_slli_epi32(exp_field, static_cast<unsigned>(p.man_bits)), kept);

  const __mmask16 inexact = _mm512_test_epi32_mask(rem, rem);
  __mmask16 up = 0;
  switch (p.opt.mode) {
    case Round::nearest_even: {
      const __mmask16 gt = _mm512_cmpgt_epu32_mask(rem, half);
      const __mmask16 tie = _mm512_mask_cmpeq_epi32_mask(inexact, rem, half);
      up = gt | (tie & _mm512_test_epi32_mask(kept, one));
      break;
    }
    case Round::nearest_away: up = _mm512_mask_cmpge_epu32_mask(inexact, rem, half); break;
    case Round::toward_zero: up = 0; break;
    case Round::up: up = inexact & static_cast<__mmask16>(~neg); break;
    case Round::down: up = inexact & neg; break;
    case Round::stochastic: up = inexact & stochastic_up(rem, sh_true, random, p.opt.random_bits); break;
  }
  mag = _mm512_mask_add_epi32(mag, up, mag, one);
  if (p.opt.flush_subnormals) {
    const __mmask16 tiny = _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(static_cast<int>(p.min_normal_mag)));
    mag = _mm512_mask_mov_epi32(mag, tiny, _mm512_setzero_si512());
  }
  const __mmask16 overflow = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(static_cast<int>(p.max_mag)));
  __mmask16 signed_lanes = neg;
  if (!p.negative_zero) signed_lanes &= _mm512_test_epi32_mask(mag, mag);
  __m512i code = _mm512_mask_or_epi32(mag, signed_lanes, mag, _mm512_set1_epi32(static_cast<int>(p.sign_bit)));
  code = _mm512_mask_mov_epi32(code, overflow, by_sign(neg, p.overflow_code));
  if (special) {
    const __mmask16 nan = special & _mm512_test_epi32_mask(m32, m32);
    code = _mm512_mask_mov_epi32(code, special & static_cast<__mmask16>(~nan), by_sign(neg, p.inf_code));
    code = _mm512_mask_mov_epi32(code, nan, by_sign(neg, p.nan_code));
  }
  return _mm512_sll_epi32(code, _mm_cvtsi32_si128(p.packed_shift));
}

// Random draws of 16 consecutive elements; only used in stochastic mode.
MANTISSA_AVX512 inline __m512i draws16(const QuantPlan& p, uint64_t index) {
  if (p.opt.mode != Round::stochastic) return _mm512_setzero_si512();
  return stochastic_draws16(p.opt.seed, index, p.opt.random_bits);
}


}  // namespace mantissa::formats::detail
