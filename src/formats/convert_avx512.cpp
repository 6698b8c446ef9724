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

// AVX512-BF16 nearest-even, 16 lanes (those outside m read as zero). The
// instruction treats fp32 subnormal inputs as zero and quiets NaNs its own
// way, so those lanes take the integer rounder.
MANTISSA_AVX512_BF16 inline __m256i bf16_16(const QuantPlan& p, const float* in, __mmask16 m) {
  const __m512 v = _mm512_maskz_loadu_ps(m, in);
  const __m512i x = _mm512_castps_si512(v);
  __m256i h = std::bit_cast<__m256i>(_mm512_cvtneps_pbh(v));
  // One vfpclassps finds both: quiet NaN 0x01, signalling NaN 0x80, subnormal 0x20.
  const __mmask16 odd = _mm512_mask_fpclass_ps_mask(m, v, 0x01 | 0x20 | 0x80);
  if (odd) {
    const __m256i fix = _mm512_cvtepi32_epi16(round16(p, x, _mm512_setzero_si512()));
    h = _mm256_mask_mov_epi16(h, odd, fix);
  }
  return h;
}

// F16C-style vcvtps2ph with an explicit nearest-even immediate (ignores the
// MXCSR rounding mode); NaN lanes take the reference's NaN codes.
MANTISSA_AVX512 inline __m256i fp16_16(const QuantPlan& p, const float* in, __mmask16 m) {
  const __m512 v = _mm512_maskz_loadu_ps(m, in);
  const __m512i x = _mm512_castps_si512(v);
  __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 nan =
      m & _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  if (nan) {
    const __m256i fix = _mm512_cvtepi32_epi16(round16(p, x, _mm512_setzero_si512()));
    h = _mm256_mask_mov_epi16(h, nan, fix);
  }
  return h;
}

MANTISSA_AVX512_BF16 void quantize_avx512_bf16_hw(const QuantPlan& p, const float* in, void* codes, size_t n,
                                                  uint64_t base) {
  auto* out = static_cast<uint16_t*>(codes);
  store_split(
      stream_split(p.stream, codes, 2, n), n, 16, 32,
      [&](size_t i, size_t left) MANTISSA_AVX512_BF16 {
        const __mmask16 m = tail_mask16(left);
        _mm256_mask_storeu_epi16(out + i, m, bf16_16(p, in + i, m));
      },
      [&](size_t i) MANTISSA_AVX512_BF16 {
        _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i),
                            join256(bf16_16(p, in + i, 0xFFFF), bf16_16(p, in + i + 16, 0xFFFF)));
      });
  (void)base;
}

// Fake quantisation to bf16 / fp16 in one pass: the codes are rounded as the
// quantize kernels above round them and widened back in registers (a bf16
// code is the top half of its fp32 value; vcvtph2ps is exact), so the fp32
// array is read and written once, the output with streaming stores when the
// plan asks.
// NaN lanes become the reference decoder's one NaN, +quiet 0x7FC00000.
MANTISSA_AVX512 inline __m512 canonical_nan(__m512 v) {
  return _mm512_mask_mov_ps(v, _mm512_fpclass_ps_mask(v, 0x01 | 0x80), _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
}

MANTISSA_AVX512_BF16 inline __m512 widen_bf16(__m256i h) {
  return canonical_nan(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
}

MANTISSA_AVX512_BF16 void fake_quantize_avx512_bf16_hw(const QuantPlan& p, const float* in, float* out, size_t n,
                                                       uint64_t base) {
  store_split(
      stream_split(p.stream, out, 4, n), n, 16, 16,
      [&](size_t i, size_t left) MANTISSA_AVX512_BF16 {
        const __mmask16 m = tail_mask16(left);
        _mm512_mask_storeu_ps(out + i, m, widen_bf16(bf16_16(p, in + i, m)));
      },
      [&](size_t i) MANTISSA_AVX512_BF16 { _mm512_stream_ps(out + i, widen_bf16(bf16_16(p, in + i, 0xFFFF))); });
  (void)base;
}

MANTISSA_AVX512 void fake_quantize_avx512_fp16_hw(const QuantPlan& p, const float* in, float* out, size_t n,
                                                  uint64_t base) {
  store_split(
      stream_split(p.stream, out, 4, n), n, 16, 16,
      [&](size_t i, size_t left) MANTISSA_AVX512 {
        const __mmask16 m = tail_mask16(left);
        _mm512_mask_storeu_ps(out + i, m, canonical_nan(_mm512_cvtph_ps(fp16_16(p, in + i, m))));
      },
      [&](size_t i) MANTISSA_AVX512 { _mm512_stream_ps(out + i, canonical_nan(_mm512_cvtph_ps(fp16_16(p, in + i, 0xFFFF)))); });
  (void)base;
}

MANTISSA_AVX512 void quantize_avx512_fp16_hw(const QuantPlan& p, const float* in, void* codes, size_t n,
                                             uint64_t base) {
  auto* out = static_cast<uint16_t*>(codes);
  store_split(
      stream_split(p.stream, codes, 2, n), n, 16, 32,
      [&](size_t i, size_t left) MANTISSA_AVX512 {
        const __mmask16 m = tail_mask16(left);
        _mm256_mask_storeu_epi16(out + i, m, fp16_16(p, in + i, m));
      },
      [&](size_t i) MANTISSA_AVX512 {
        _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i),
                            join256(fp16_16(p, in + i, 0xFFFF), fp16_16(p, in + i + 16, 0xFFFF)));
      });
  (void)base;
}

}  // namespace mantissa::formats::detail
