// Bulk fp32 -> FP8/FP6/FP4 conversion through the hardware fp16 converter
// (see convert_avx512_small.hpp for why it gives the reference's bits).
#include "formats/convert_avx512_small.hpp"

#include <cmath>

namespace mantissa::formats::detail {

bool small_route(const QuantPlan& p) {
  const Format& f = *p.format;
  return f.kind == Kind::floating && f.is_signed && f.subnormals && p.bytes == 1 && p.packed_shift == 0 &&
         f.exponent_bits <= 5 && f.mantissa_bits <= 8 && f.max_exponent() - f.min_exponent() <= 29 &&
         p.opt.mode != Round::stochastic;
}

MANTISSA_AVX512 void quantize_avx512_small(const QuantPlan& p, const float* in, void* codes, size_t n,
                                           uint64_t base) {
  auto* out = static_cast<uint8_t*>(codes);
  const __m512 scale = _mm512_set1_ps(std::ldexp(1.0f, small_route_shift(p)));
  const __m512 unit = _mm512_set1_ps(1.0f);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i c = round32_small(p, _mm512_loadu_ps(in + i), _mm512_loadu_ps(in + i + 16), scale, unit);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi16_epi8(c));
  }
  if (i < n) {
    const size_t left = n - i;
    const __mmask16 mlo = left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
    const __mmask16 mhi = left > 16 ? static_cast<__mmask16>((1u << (left - 16)) - 1) : __mmask16{0};
    const __m512i c = round32_small(p, _mm512_maskz_loadu_ps(mlo, in + i), _mm512_maskz_loadu_ps(mhi, in + i + 16),
                                    scale, unit);
    const __mmask32 m = static_cast<__mmask32>(mlo) | (static_cast<__mmask32>(mhi) << 16);
    _mm256_mask_storeu_epi8(out + i, m, _mm512_cvtepi16_epi8(c));
  }
  (void)base;
}

}  // namespace mantissa::formats::detail
