// Internal to the AVX-512 kernels (lookup.cpp, scaled_cast.cpp): the
// byte -> 16-bit table lookup of 32 codes in registers, and the power-of-two
// fold of 32 bf16 values that block-scaled decodes apply after it.
#pragma once

#include "formats/convert_avx512_util.hpp"
#include "mantissa/formats/lookup.hpp"

namespace mantissa::formats::detail {

struct Table16Regs {
  __m512i t[8];
};

MANTISSA_AVX512 inline Table16Regs load_table(const Table16& table) {
  Table16Regs r;
  for (int k = 0; k < 8; ++k) r.t[k] = _mm512_loadu_si512(table.data() + 32 * k);
  return r;
}

// Entries of 32 codes given in 16-bit lanes (values < 256): each looked up in
// the four 64-entry quarters of the table (vpermi2w uses the index's low 6
// bits), then the quarter picked by index bits 6 and 7.
MANTISSA_AVX512 inline __m512i lookup32(const Table16Regs& r, __m512i idx) {
  const __m512i q0 = _mm512_permutex2var_epi16(r.t[0], idx, r.t[1]);
  const __m512i q1 = _mm512_permutex2var_epi16(r.t[2], idx, r.t[3]);
  const __m512i q2 = _mm512_permutex2var_epi16(r.t[4], idx, r.t[5]);
  const __m512i q3 = _mm512_permutex2var_epi16(r.t[6], idx, r.t[7]);
  const __mmask32 bit6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40));
  const __mmask32 bit7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x80));
  const __m512i lo = _mm512_mask_mov_epi16(q0, bit6, q1);
  const __m512i hi = _mm512_mask_mov_epi16(q2, bit6, q3);
  return _mm512_mask_mov_epi16(lo, bit7, hi);
}

// 32 bf16 values (16-bit lanes) times flo (elements 0..15) and fhi (16..31):
// the top 16 bits of each fp32 product, as the scalar fold does.
MANTISSA_AVX512 inline __m512i fold32(__m512i d, __m512 flo, __m512 fhi) {
  const __m512i lo = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(d)), 16);
  const __m512i hi = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(d, 1)), 16);
  const __m512i plo = _mm512_srli_epi32(_mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(lo), flo)), 16);
  const __m512i phi = _mm512_srli_epi32(_mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(hi), fhi)), 16);
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(plo)), _mm512_cvtepi32_epi16(phi), 1);
}

}  // namespace mantissa::formats::detail
