// Byte -> 16-bit table lookup (formats/lookup.hpp).
#include "mantissa/formats/lookup.hpp"

#include "formats/convert_avx512_util.hpp"
#include "mantissa/formats/convert.hpp"

namespace mantissa::formats {
namespace {

void lookup16_scalar(const Table16& table, const uint8_t* codes, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = table[codes[i]];
}

// 32 codes: widen to 16-bit lanes, look each up in the four 64-entry
// quarters of the table (vpermi2w uses the index's low 6 bits), then pick the
// quarter by index bits 6 and 7.
MANTISSA_AVX512 inline __m512i lookup32(const __m512i (&t)[8], __m256i bytes) {
  const __m512i idx = _mm512_cvtepu8_epi16(bytes);
  const __m512i q0 = _mm512_permutex2var_epi16(t[0], idx, t[1]);
  const __m512i q1 = _mm512_permutex2var_epi16(t[2], idx, t[3]);
  const __m512i q2 = _mm512_permutex2var_epi16(t[4], idx, t[5]);
  const __m512i q3 = _mm512_permutex2var_epi16(t[6], idx, t[7]);
  const __mmask32 bit6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40));
  const __mmask32 bit7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x80));
  const __m512i lo = _mm512_mask_mov_epi16(q0, bit6, q1);
  const __m512i hi = _mm512_mask_mov_epi16(q2, bit6, q3);
  return _mm512_mask_mov_epi16(lo, bit7, hi);
}

MANTISSA_AVX512 void lookup16_avx512(const Table16& table, const uint8_t* codes, uint16_t* out, size_t n) {
  __m512i t[8];
  for (int k = 0; k < 8; ++k) t[k] = _mm512_loadu_si512(table.data() + 32 * k);
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    _mm512_storeu_si512(out + i, lookup32(t, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i))));
  if (i < n) {
    const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1);
    _mm512_mask_storeu_epi16(out + i, m, lookup32(t, _mm256_maskz_loadu_epi8(m, codes + i)));
  }
}

}  // namespace

void lookup16(const Table16& table, const uint8_t* codes, uint16_t* out, size_t n) {
  if (active_isa() >= Isa::avx512)
    lookup16_avx512(table, codes, out, n);
  else
    lookup16_scalar(table, codes, out, n);
}

}  // namespace mantissa::formats
