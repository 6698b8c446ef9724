// Internal to the fused cast (scaled_cast.cpp): a short FP8 rounder for
// finite fp32 lanes that gives the codes and their values as fp32, so a cast
// that also needs the decode (bf16, optionally times a block scale) skips the
// table lookup. For signed 1-byte formats with subnormals and negative zero
// whose exponent range fits the fp16 route (e4m3fn, e5m2), nearest-even.
// Lanes holding inf/NaN, and finite overflow when the cast does not saturate,
// are left to the general rounders (the caller checks). Checked against the
// bulk converters on all 2^32 fp32 inputs
// (tests/exhaustive/test_exhaustive_scaled_cast.cpp).
//
// Rounding: with E = the exponent of |s| clamped to [emin, emax + 1] and
// C = +-2^(E + 23 - M) (s's sign), the ulp of C is 2^(E - M), the target's
// spacing at |s| (normal and subnormal range alike), and |s| < 2^(E+1) is
// far below C; so t = s + C rounded to nearest-even and r = t - C (exact)
// is s rounded to the target's grid. A zero result takes s's sign back (the
// subtraction gives +0). Values past emax + 1 only need r > max, which holds.
// r beyond max is overflow: +-max when saturating.
//
// Codes: r x 2^shift (small_route_shift) is exactly an fp16 value whose bits,
// shifted right by 10 - M, are the code (the fp16 route's argument in
// convert_avx512_small.hpp), with fp16's sign moved to bit 7.
#pragma once

#include <bit>
#include <cmath>

#include "formats/convert_avx512_small.hpp"
#include "formats/convert_avx512_util.hpp"
#include "formats/convert_plan.hpp"

namespace mantissa::formats::detail {

struct Fp8Rounder {
  bool usable = false;
  bool saturates = false;    // finite overflow gives +-max (else the general rounders)
  uint32_t e_min = 0;        // exponent field of 2^emin
  uint32_t e_cap = 0;        // exponent field of 2^(emax + 1)
  uint32_t c_offset = 0;     // (23 - M) in the exponent field
  float max = 0;
  float shift = 1;           // 2^small_route_shift
  int code_shift = 0;        // 10 - M
};

// The rounder's constants; `usable` only for the formats and options above.
inline Fp8Rounder make_fp8_rounder(const QuantPlan& p) {
  Fp8Rounder r;
  const Format& f = *p.format;
  if (!small_route(p) || !f.negative_zero || f.exponent_bits + f.mantissa_bits != 7 ||
      p.opt.mode != Round::nearest_even || p.opt.flush_subnormals)
    return r;
  r.usable = true;
  r.saturates = p.overflow_code[0] == p.max_mag && p.overflow_code[1] == (p.sign_bit | p.max_mag);
  r.e_min = static_cast<uint32_t>(127 + p.emin) << 23;
  r.e_cap = static_cast<uint32_t>(127 + f.max_exponent() + 1) << 23;
  r.c_offset = static_cast<uint32_t>(23 - p.man_bits) << 23;
  r.max = static_cast<float>(f.max());
  r.shift = std::ldexp(1.0f, small_route_shift(p));
  r.code_shift = 10 - p.man_bits;
  return r;
}

// The constants of round16_fp8 / codes32_fp8 in registers (built once per pass).
struct Fp8Regs {
  __m512i e_min, e_cap, c_offset;
  __m512 max, shift;
  __m128i code_shift;
  bool saturates;
};

MANTISSA_AVX512 inline Fp8Regs fp8_regs(const Fp8Rounder& k) {
  return {_mm512_set1_epi32(static_cast<int>(k.e_min)), _mm512_set1_epi32(static_cast<int>(k.e_cap)),
          _mm512_set1_epi32(static_cast<int>(k.c_offset)), _mm512_set1_ps(k.max), _mm512_set1_ps(k.shift),
          _mm_cvtsi32_si128(k.code_shift), k.saturates};
}

// 16 finite lanes s rounded to the grid (saturated when k.saturates); `over`
// marks lanes with |s| beyond max (a superset of those whose rounding is).
MANTISSA_AVX512 inline __m512 round16_fp8(const Fp8Regs& k, __m512 s, __mmask16& over) {
  const __m512i bits = _mm512_castps_si512(s);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  __m512i e = _mm512_and_si512(bits, _mm512_set1_epi32(0x7F800000));
  e = _mm512_min_epu32(_mm512_max_epu32(e, k.e_min), k.e_cap);
  // C: (e + offset) with s's sign bit (ternary logic: a | (b & c)).
  const __m512 c = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_add_epi32(e, k.c_offset), bits, sign, 0xF8));
  const __m512 t = _mm512_add_round_ps(s, c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(_mm512_sub_ps(t, c)), bits, sign, 0xF8));
  over = _mm512_cmp_ps_mask(_mm512_abs_ps(s), k.max, _CMP_GT_OQ);
  // Saturation: of r and +max the one smaller in magnitude, with r's sign (vrangeps).
  if (k.saturates) r = _mm512_range_ps(r, k.max, 0x2);
  return r;
}

// The codes of 32 grid values (lo: elements 0..15, hi: 16..31) in 16-bit lanes.
MANTISSA_AVX512 inline __m512i codes32_fp8(const Fp8Regs& k, __m512 lo, __m512 hi) {
  const __m256i hlo = _mm512_cvtps_ph(_mm512_mul_ps(lo, k.shift), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256i hhi = _mm512_cvtps_ph(_mm512_mul_ps(hi, k.shift), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(hlo), hhi, 1);
  // Magnitude from h >> (10 - M), sign (fp16 bit 15) from h >> 8: select by bit mask 0x7F.
  return _mm512_ternarylogic_epi32(_mm512_srl_epi16(h, k.code_shift), _mm512_srli_epi16(h, 8), _mm512_set1_epi16(0x7F),
                                   0xE4);
}

}  // namespace mantissa::formats::detail
