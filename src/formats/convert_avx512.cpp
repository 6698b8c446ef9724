// AVX-512 conversion kernels. Compiled for any x86-64 target: each function
// carries its own target attribute and runs only after the CPU check in
// convert.cpp. Every kernel must give the scalar reference's bits.
#include <bit>

#include "formats/convert_avx512_round.hpp"
#include "formats/convert_avx512_util.hpp"
#include "formats/convert_plan.hpp"

namespace mantissa::formats::detail {

MANTISSA_AVX512 void quantize_avx512_generic(const QuantPlan& p, const float* in, void* codes, size_t n,
                                             uint64_t base) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(in + i);
    store_codes(p.bytes, codes, i, round16(p, x, draws16(p, base + i)), 0xFFFF);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512i x = _mm512_maskz_loadu_epi32(m, in + i);
    store_codes(p.bytes, codes, i, round16(p, x, draws16(p, base + i)), m);
  }
}

// AVX512-BF16 nearest-even. The instruction treats fp32 subnormal inputs as
// zero and quiets NaNs its own way, so those lanes take the integer rounder.
MANTISSA_AVX512_BF16 void quantize_avx512_bf16_hw(const QuantPlan& p, const float* in, void* codes, size_t n,
                                                  uint64_t base) {
  auto* out = static_cast<uint16_t*>(codes);
  const __m512i exp_mask = _mm512_set1_epi32(0x7F800000);
  size_t i = 0;
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, in + i);
    const __m512i x = _mm512_castps_si512(v);
    __m256i h = std::bit_cast<__m256i>(_mm512_cvtneps_pbh(v));
    const __m512i e = _mm512_and_si512(x, exp_mask);
    const __mmask16 odd = m & (_mm512_cmpeq_epi32_mask(e, exp_mask) |
                               _mm512_mask_cmpeq_epi32_mask(_mm512_test_epi32_mask(x, _mm512_set1_epi32(0x7FFFFF)),
                                                            e, _mm512_setzero_si512()));
    if (odd) {
      const __m256i fix = _mm512_cvtepi32_epi16(round16(p, x, _mm512_setzero_si512()));
      h = _mm256_mask_mov_epi16(h, odd, fix);
    }
    _mm256_mask_storeu_epi16(out + i, m, h);
  }
  (void)base;
}

// F16C-style vcvtps2ph with an explicit nearest-even immediate (ignores the
// MXCSR rounding mode); NaN lanes take the reference's NaN codes.
MANTISSA_AVX512 void quantize_avx512_fp16_hw(const QuantPlan& p, const float* in, void* codes, size_t n,
                                             uint64_t base) {
  auto* out = static_cast<uint16_t*>(codes);
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i inf_bits = _mm512_set1_epi32(0x7F800000);
  size_t i = 0;
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, in + i);
    const __m512i x = _mm512_castps_si512(v);
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = m & _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf_bits);
    if (nan) {
      const __m256i fix = _mm512_cvtepi32_epi16(round16(p, x, _mm512_setzero_si512()));
      h = _mm256_mask_mov_epi16(h, nan, fix);
    }
    _mm256_mask_storeu_epi16(out + i, m, h);
  }
  (void)base;
}

}  // namespace mantissa::formats::detail
