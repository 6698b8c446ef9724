// AVX2 bulk conversion kernels (fp32 -> codes). Compiled for any x86-64
// target: each function carries MANTISSA_AVX2 and runs only after the table
// in convert.cpp chose it. Tails (the last n % step elements) are converted
// from a zero-padded copy and only their own codes are written back.
#include <cmath>
#include <cstring>

#include "formats/convert_avx2.hpp"
#include "formats/convert_avx2_round.hpp"
#include "formats/convert_avx2_small.hpp"

namespace mantissa::formats::detail {

namespace {

using namespace avx2;

// Runs step(src, dst, i) on every whole `step` elements of in[0..n), then on
// a zero-padded copy of the tail, copying back only the tail's output
// (one Out per element).
template <size_t kStep, class Out, class Step>
[[gnu::always_inline]] inline void for_steps(const float* in, Out* out, size_t n, Step step) {
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) step(in + i, out + i, i);
  if (i < n) {
    alignas(32) float pad[kStep] = {};
    alignas(32) Out res[kStep];
    std::memcpy(pad, in + i, (n - i) * sizeof(float));
    step(pad, res, i);
    std::memcpy(out + i, res, (n - i) * sizeof(Out));
  }
}

// As for_steps, 8 elements a step, for codes of the plan's width (1, 2 or 4
// bytes).
template <class Step>
[[gnu::always_inline]] inline void code_steps8(const QuantPlan& p, const float* in, void* codes,
                                                             size_t n, Step step) {
  auto* out = static_cast<uint8_t*>(codes);
  const size_t bytes = static_cast<size_t>(p.bytes);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) step(in + i, out + i * bytes, i);
  if (i < n) {
    alignas(32) float pad[8] = {};
    alignas(32) uint8_t res[32];
    std::memcpy(pad, in + i, (n - i) * sizeof(float));
    step(pad, res, i);
    std::memcpy(out + i * bytes, res, (n - i) * bytes);
  }
}

// vcvtps2ph with an explicit nearest-even immediate (ignores MXCSR); NaN
// lanes take the reference's NaN codes from the integer rounder.
MANTISSA_AVX2 inline __m128i fp16_8(const QuantPlan& p, const float* in) {
  const __m256 v = _mm256_loadu_ps(in);
  const __m256i x = _mm256_castps_si256(v);
  __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, set1(0x7FFFFFFF)), set1(0x7F800000));
  if (any(nan)) {
    const __m256i fix = round8(p, x, _mm256_setzero_si256());
    const __m128i fix16 = _mm_packus_epi32(_mm256_castsi256_si128(fix), _mm256_extracti128_si256(fix, 1));
    const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
    h = _mm_blendv_epi8(h, fix16, nan16);
  }
  return h;
}

// NaN lanes become the reference decoder's one NaN, +quiet 0x7FC00000.
MANTISSA_AVX2 inline __m256 canonical_nan(__m256 v) {
  return _mm256_blendv_ps(v, _mm256_castsi256_ps(set1(0x7FC00000)), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

}  // namespace

MANTISSA_AVX2 void quantize_avx2_generic(const QuantPlan& plan, const float* in, void* codes, size_t n,
                                         uint64_t base) {
  const QuantPlan p = plan;  // a local copy: the code stores cannot alias it
  code_steps8(p, in, codes, n, [&](const float* x, uint8_t* out, size_t i) MANTISSA_AVX2 {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    store_codes8(p.bytes, out, 0, round8(p, v, draws8(p, base + i)));
  });
}

MANTISSA_AVX2 void quantize_avx2_fp16_hw(const QuantPlan& plan, const float* in, void* codes, size_t n,
                                         uint64_t base) {
  const QuantPlan p = plan;
  for_steps<8>(in, static_cast<uint16_t*>(codes), n, [&](const float* x, uint16_t* out, size_t) MANTISSA_AVX2 {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), fp16_8(p, x));
  });
  (void)base;
}

MANTISSA_AVX2 void fake_quantize_avx2_fp16_hw(const QuantPlan& plan, const float* in, float* out, size_t n,
                                              uint64_t base) {
  const QuantPlan p = plan;
  for_steps<8>(in, out, n, [&](const float* x, float* o, size_t) MANTISSA_AVX2 {
    _mm256_storeu_ps(o, canonical_nan(_mm256_cvtph_ps(fp16_8(p, x))));
  });
  (void)base;
}

MANTISSA_AVX2 void quantize_avx2_small(const QuantPlan& plan, const float* in, void* codes, size_t n,
                                       uint64_t base) {
  const QuantPlan p = plan;
  const __m256 scale = _mm256_set1_ps(std::ldexp(1.0f, -14 - p.emin));  // small_route_shift
  for_steps<16>(in, static_cast<uint8_t*>(codes), n, [&](const float* x, uint8_t* out, size_t) MANTISSA_AVX2 {
    const __m256i c = round16_small(p, _mm256_loadu_ps(x), _mm256_loadu_ps(x + 8), scale, scale);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), pack8(c));
  });
  (void)base;
}

}  // namespace mantissa::formats::detail
