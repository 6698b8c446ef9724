// Byte -> 16-bit table lookup (formats/lookup.hpp).
#include "mantissa/formats/lookup.hpp"

#include <algorithm>
#include <bit>

#include "formats/convert_avx512_lookup.hpp"
#include "mantissa/formats/convert.hpp"

namespace mantissa::formats {
namespace {

uint16_t fold_scalar(uint16_t bits, float fold) {
  const float v = std::bit_cast<float>(static_cast<uint32_t>(bits) << 16) * fold;
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
}

void lookup16_scalar(const Table16& table, const uint8_t* codes, uint16_t* out, size_t n, const float* fold,
                     size_t group) {
  for (size_t i = 0; i < n; ++i) out[i] = fold ? fold_scalar(table[codes[i]], fold[i / group]) : table[codes[i]];
}

// Codes [i, i + 32) (those in m), folded by flo/fhi when kFold.
template <bool kFold>
MANTISSA_AVX512 inline void lookup_step(const detail::Table16Regs& t, const uint8_t* codes, uint16_t* out, size_t i,
                                        detail::TailMask32 m, __m512 flo, __m512 fhi) {
  __m512i d = detail::lookup32(t, _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m.both(), codes + i)));
  if constexpr (kFold) d = detail::fold32(d, flo, fhi);
  _mm512_mask_storeu_epi16(out + i, m.both(), d);
}

MANTISSA_AVX512 void lookup16_avx512(const Table16& table, const uint8_t* codes, uint16_t* out, size_t n,
                                     const float* fold, size_t group) {
  const detail::Table16Regs t = detail::load_table(table);
  if (!fold) {
    const __m512 none = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 32) lookup_step<false>(t, codes, out, i, detail::tail_mask32(n - i), none, none);
  } else if (group == 1) {
    for (size_t i = 0; i < n; i += 32) {
      const detail::TailMask32 m = detail::tail_mask32(n - i);
      lookup_step<true>(t, codes, out, i, m, _mm512_maskz_loadu_ps(m.lo, fold + i),
                        _mm512_maskz_loadu_ps(m.hi, fold + i + 16));
    }
  } else {  // one multiplier per group: no step straddles two groups
    for (size_t g0 = 0; g0 < n; g0 += group) {
      const __m512 f = _mm512_set1_ps(fold[g0 / group]);
      const size_t end = std::min(n, g0 + group);
      for (size_t i = g0; i < end; i += 32) lookup_step<true>(t, codes, out, i, detail::tail_mask32(end - i), f, f);
    }
  }
}

}  // namespace

void lookup16(const Table16& table, const uint8_t* codes, uint16_t* out, size_t n, const float* fold, size_t group) {
  if (active_isa() >= Isa::avx512)
    lookup16_avx512(table, codes, out, n, fold, group);
  else
    lookup16_scalar(table, codes, out, n, fold, group);
}

}  // namespace mantissa::formats
