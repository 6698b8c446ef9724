// AVX2 decode of codes to fp32, 8 lanes at a time (the form of
// convert_avx512_decode.cpp): exponent and mantissa fields moved into fp32
// position, target subnormals through an exact int -> float conversion and
// a power-of-two scale; NaN/inf and other reserved codes, rare in real data,
// through the scalar reference lane by lane.
#include <cmath>
#include <cstring>

#include "formats/convert_avx2.hpp"
#include "formats/convert_avx2_util.hpp"

namespace mantissa::formats::detail {

namespace {

using namespace avx2;

// 8 codes of `bytes` bytes from c (exactly 8 readable).
MANTISSA_AVX2 inline __m256i load_codes8(int bytes, const uint8_t* c) {
  if (bytes == 1) return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)));
  if (bytes == 2) return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
}

// Lanes of `odd` (a lane mask) replaced by the scalar reference's decode of raw.
MANTISSA_AVX2 inline void fix_lanes(const Format& f, __m256i raw, __m256i odd, float* out) {
  const unsigned lanes = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(odd)));
  if (lanes == 0) return;
  alignas(32) uint32_t codes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(codes), raw);
  for (unsigned j = 0; j < 8; ++j)
    if ((lanes >> j) & 1u) out[j] = decode_f32(f, codes[j]);
}

// 8 codes at c to 8 fp32 at out.
// sub_scale: the value of one subnormal quantum, 2^(emin - M).
MANTISSA_AVX2 inline void decode8(const QuantPlan& p, __m256 sub_scale, const uint8_t* c8, float* out) {
  const uint32_t mag_mask = p.sign_bit - 1;
  const uint32_t man_mask = (uint32_t{1} << p.man_bits) - 1;
  const uint32_t exp_all = mag_mask >> p.man_bits;
  const __m256i raw = load_codes8(p.bytes, c8);
  if (p.shape == Shape::fp16 && p.format->subnormals && p.format->is_signed) {
    // vcvtph2ps is exact for every finite fp16 value and inf.
    const __m256i h = raw;
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1))));
    fix_lanes(*p.format, raw, _mm256_cmpgt_epi32(_mm256_and_si256(h, set1(0x7FFF)), set1(0x7C00)), out);
    return;
  }
  if (p.shape == Shape::bf16 && p.format->subnormals) {
    // The code is the top half of the fp32 bits.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_slli_epi32(raw, 16));
    fix_lanes(*p.format, raw, _mm256_cmpgt_epi32(_mm256_and_si256(raw, set1(0x7FFF)), set1(0x7F80)), out);
    return;
  }
  const __m256i c = _mm256_srl_epi32(raw, _mm_cvtsi32_si128(p.packed_shift));
  const __m256i mag = _mm256_and_si256(c, set1(mag_mask));
  const __m256i e = _mm256_srli_epi32(mag, p.man_bits);
  const __m256i man = _mm256_and_si256(mag, set1(man_mask));
  const __m256i normal_bits = _mm256_or_si256(
      _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(p.emin - 1 + 127)), 23),
      _mm256_slli_epi32(man, 23 - p.man_bits));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(man), sub_scale);
  const __m256i neg = not_mask(is_zero32(_mm256_and_si256(c, set1(p.sign_bit))));
  const __m256i bits = _mm256_or_si256(blend(normal_bits, _mm256_castps_si256(sub), is_zero32(e)),
                                       _mm256_and_si256(neg, set1(0x80000000u)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bits);

  // Lanes the field arithmetic does not cover: out-of-range codes, and the
  // format's inf/NaN/unsigned-zero codes (codes are below 2^31).
  __m256i odd = _mm256_cmpgt_epi32(c, set1(p.sign_bit | mag_mask));
  switch (p.format->nan) {
    case NanEncoding::ieee: odd = _mm256_or_si256(odd, _mm256_cmpeq_epi32(e, set1(exp_all))); break;
    case NanEncoding::fn: odd = _mm256_or_si256(odd, _mm256_cmpeq_epi32(mag, set1(mag_mask))); break;
    case NanEncoding::fnuz:
    case NanEncoding::none: break;
  }
  if (!p.negative_zero) odd = _mm256_or_si256(odd, _mm256_cmpeq_epi32(c, set1(p.sign_bit)));
  fix_lanes(*p.format, raw, odd, out);
}

}  // namespace

MANTISSA_AVX2 void dequantize_avx2(const QuantPlan& plan, const void* codes, float* out, size_t n) {
  const QuantPlan p = plan;  // a local copy: the stores cannot alias it
  const auto* c = static_cast<const uint8_t*>(codes);
  const size_t bytes = static_cast<size_t>(p.bytes);
  const __m256 sub_scale = _mm256_set1_ps(std::ldexp(1.0f, p.emin - p.man_bits));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) decode8(p, sub_scale, c + i * bytes, out + i);
  if (i < n) {
    alignas(32) uint8_t pad[32] = {};
    alignas(32) float res[8];
    std::memcpy(pad, c + i * bytes, (n - i) * bytes);
    decode8(p, sub_scale, pad, res);
    std::memcpy(out + i, res, (n - i) * sizeof(float));
  }
}

}  // namespace mantissa::formats::detail
