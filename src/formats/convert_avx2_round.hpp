// Internal to the AVX2 converters: the integer-arithmetic rounder of 8 fp32
// lanes into any floating format a QuantPlan describes (the 8-lane form of
// convert_avx512_round.hpp's round16, shared by the bulk kernels, the fused
// cast and the MX block kernel).
#pragma once

#include "formats/convert_avx2_util.hpp"
#include "formats/convert_plan.hpp"

namespace mantissa::formats::detail::avx2 {

// Rounds 8 fp32 lanes into codes: the fp32 significand is shifted right by
// the number of bits the target cannot hold, the dropped bits decide the
// rounding, and the carry of a round-up propagates into the exponent field.
//
// kScaled: the value rounded is x * 2^scale_exp (MX blocks), done on the
// exponent so it is exact; fp32 subnormals are first normalised (x * 2^24 is
// exact) because a scaled one may land in the target's normal range.
template <bool kScaled = false>
MANTISSA_AVX2 inline __m256i round8(const QuantPlan& p, __m256i x, __m256i random, int scale_exp = 0) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i neg = _mm256_srai_epi32(x, 31);
  __m256i a = _mm256_and_si256(x, set1(0x7FFFFFFF));
  __m256i e_offset = _mm256_set1_epi32(scale_exp);
  if constexpr (kScaled) {
    const __m256i sub = _mm256_cmpgt_epi32(set1(0x800000), a);
    a = blend(a, _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(0x1p24f))), sub);
    e_offset = _mm256_sub_epi32(e_offset, _mm256_and_si256(sub, _mm256_set1_epi32(24)));
  }
  const __m256i e32 = _mm256_srli_epi32(a, 23);
  const __m256i m32 = _mm256_and_si256(a, set1(0x7FFFFF));
  const __m256i special = _mm256_cmpeq_epi32(e32, _mm256_set1_epi32(255));
  const __m256i normal = not_mask(is_zero32(e32));
  const __m256i sig = _mm256_or_si256(m32, _mm256_and_si256(normal, set1(0x800000)));
  __m256i e_eff = _mm256_max_epi32(e32, one);
  if constexpr (kScaled) e_eff = _mm256_add_epi32(e_eff, e_offset);
  // Bits below the target's subnormal quantum: (23 - M) + max(emin - e, 0).
  const __m256i below_emin = _mm256_max_epi32(_mm256_sub_epi32(_mm256_set1_epi32(p.emin + 127), e_eff), zero);
  // Shifts of 25 or more drop every bit alike; 31 keeps the counts below 32,
  // while stochastic rounding weighs the remainder with the true shift.
  const __m256i sh_true = _mm256_add_epi32(below_emin, _mm256_set1_epi32(23 - p.man_bits));
  const __m256i sh = _mm256_min_epi32(sh_true, _mm256_set1_epi32(31));
  __m256i exp_field = _mm256_max_epi32(_mm256_sub_epi32(e_eff, _mm256_set1_epi32(p.emin + 127)), zero);
  // A zero has no exponent: scaling must not give it one.
  if constexpr (kScaled) exp_field = _mm256_andnot_si256(is_zero32(sig), exp_field);
  const __m256i kept = _mm256_srlv_epi32(sig, sh);
  const __m256i unit = _mm256_sllv_epi32(one, sh);
  const __m256i rem = _mm256_and_si256(sig, _mm256_sub_epi32(unit, one));
  const __m256i half = _mm256_srli_epi32(unit, 1);
  __m256i mag = _mm256_add_epi32(_mm256_slli_epi32(exp_field, p.man_bits), kept);

  // rem and half are below 2^31, so signed compares order them.
  const __m256i inexact = not_mask(is_zero32(rem));
  __m256i up = zero;
  switch (p.opt.mode) {
    case Round::nearest_even: {
      const __m256i gt = _mm256_cmpgt_epi32(rem, half);
      const __m256i tie = _mm256_and_si256(inexact, _mm256_cmpeq_epi32(rem, half));
      up = _mm256_or_si256(gt, _mm256_and_si256(tie, _mm256_sub_epi32(zero, _mm256_and_si256(kept, one))));
      break;
    }
    case Round::nearest_away: up = _mm256_andnot_si256(_mm256_cmpgt_epi32(half, rem), inexact); break;
    case Round::toward_zero: break;
    case Round::up: up = _mm256_andnot_si256(neg, inexact); break;
    case Round::down: up = _mm256_and_si256(inexact, neg); break;
    case Round::stochastic:
      up = _mm256_and_si256(inexact, stochastic_up(rem, sh_true, random, p.opt.random_bits));
      break;
  }
  mag = _mm256_sub_epi32(mag, up);  // up lanes are -1
  if (p.opt.flush_subnormals) mag = _mm256_andnot_si256(_mm256_cmpgt_epi32(set1(p.min_normal_mag), mag), mag);
  const __m256i overflow = _mm256_cmpgt_epi32(mag, set1(p.max_mag));
  __m256i signed_lanes = neg;
  if (!p.negative_zero) signed_lanes = _mm256_andnot_si256(is_zero32(mag), signed_lanes);
  __m256i code = _mm256_or_si256(mag, _mm256_and_si256(signed_lanes, set1(p.sign_bit)));
  code = blend(code, by_sign(neg, p.overflow_code), overflow);
  if (any(special)) {
    const __m256i nan = _mm256_andnot_si256(is_zero32(m32), special);
    code = blend(code, by_sign(neg, p.inf_code), special);
    code = blend(code, by_sign(neg, p.nan_code), nan);
  }
  return _mm256_sll_epi32(code, _mm_cvtsi32_si128(p.packed_shift));
}

// Random draws of 8 consecutive elements; only used in stochastic mode.
MANTISSA_AVX2 inline __m256i draws8(const QuantPlan& p, uint64_t index) {
  if (p.opt.mode != Round::stochastic) return _mm256_setzero_si256();
  return stochastic_draws8(p.opt.seed, index, p.opt.random_bits);
}

}  // namespace mantissa::formats::detail::avx2
