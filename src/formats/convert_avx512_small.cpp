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

MANTISSA_AVX512 void quantize_avx512_small(const QuantPlan& plan, const float* in, void* codes, size_t n,
                                           uint64_t base) {
  // A local copy: the code stores may alias `plan`, which would make the
  // compiler reload and re-broadcast its fields on every step.
  const QuantPlan p = plan;
  auto* out = static_cast<uint8_t*>(codes);
  const __m512 scale = _mm512_set1_ps(std::ldexp(1.0f, small_route_shift(p)));
  const auto codes32 = [&](size_t i, TailMask32 m) MANTISSA_AVX512 {
    return _mm512_cvtepi16_epi8(
        round32_small(p, _mm512_maskz_loadu_ps(m.lo, in + i), _mm512_maskz_loadu_ps(m.hi, in + i + 16), scale));
  };
  store_split(
      stream_split(p.stream, codes, 1, n), n, 32, 64,
      [&](size_t i, size_t left) MANTISSA_AVX512 {
        const TailMask32 m = tail_mask32(left);
        _mm256_mask_storeu_epi8(out + i, m.both(), codes32(i, m));
      },
      [&](size_t i) MANTISSA_AVX512 {
        _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i),
                            join256(codes32(i, tail_mask32(32)), codes32(i + 32, tail_mask32(32))));
      });
  (void)base;
}

}  // namespace mantissa::formats::detail
