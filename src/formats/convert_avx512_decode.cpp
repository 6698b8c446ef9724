// AVX-512 decode of packed codes to fp32: exponent and mantissa fields are
// moved into fp32 position (target subnormals via an exact int->float
// conversion and power-of-two scale); NaN/inf and other reserved codes are
// rare in real data and go through the scalar reference lane by lane.
#include <cmath>

#include "formats/convert_avx512_util.hpp"
#include "formats/convert_plan.hpp"

namespace mantissa::formats::detail {

namespace {

struct DecodeConsts {
  uint32_t mag_mask, man_mask, exp_all, mag_all;
  int normal_offset;  // fp32 exponent field = code exponent field + offset
  float sub_scale;    // value of one subnormal quantum, 2^(emin - M)
};

DecodeConsts decode_consts(const QuantPlan& p) {
  DecodeConsts k{};
  k.mag_mask = p.sign_bit - 1;
  k.man_mask = (uint32_t{1} << p.man_bits) - 1;
  k.exp_all = k.mag_mask >> p.man_bits;
  k.mag_all = k.mag_mask;
  k.normal_offset = p.emin - 1 + 127;
  k.sub_scale = std::ldexp(1.0f, p.emin - p.man_bits);
  return k;
}

MANTISSA_AVX512 inline __m512i load_codes(int bytes, const void* codes, size_t i, __mmask16 m) {
  if (bytes == 1) return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, static_cast<const uint8_t*>(codes) + i));
  if (bytes == 2)
    return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(codes) + i));
  return _mm512_maskz_loadu_epi32(m, static_cast<const uint32_t*>(codes) + i);
}

MANTISSA_AVX512 inline void decode16(const QuantPlan& p, const DecodeConsts& k, const void* codes, float* out,
                                     size_t i, __mmask16 m) {
  const __m512i raw = load_codes(p.bytes, codes, i, m);
  const __m512i c = _mm512_srl_epi32(raw, _mm_cvtsi32_si128(p.packed_shift));
  const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(static_cast<int>(k.mag_mask)));
  const __m512i e = _mm512_srli_epi32(mag, static_cast<unsigned>(p.man_bits));
  const __m512i man = _mm512_and_si512(mag, _mm512_set1_epi32(static_cast<int>(k.man_mask)));
  const __m512i normal_bits =
      _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(k.normal_offset)), 23),
                      _mm512_slli_epi32(man, static_cast<unsigned>(23 - p.man_bits)));
  const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(man), _mm512_set1_ps(k.sub_scale));
  const __mmask16 is_sub = _mm512_testn_epi32_mask(e, e);
  __m512i bits = _mm512_mask_mov_epi32(normal_bits, is_sub, _mm512_castps_si512(sub));
  const __mmask16 neg = _mm512_test_epi32_mask(c, _mm512_set1_epi32(static_cast<int>(p.sign_bit)));
  bits = _mm512_mask_or_epi32(bits, neg, bits, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  _mm512_mask_storeu_epi32(out + i, m, bits);

  // Lanes the field arithmetic does not cover: out-of-range codes, and the
  // format's inf/NaN/unsigned-zero codes.
  __mmask16 odd = _mm512_cmpgt_epu32_mask(c, _mm512_set1_epi32(static_cast<int>(p.sign_bit | k.mag_mask)));
  switch (p.format->nan) {
    case NanEncoding::ieee: odd |= _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(static_cast<int>(k.exp_all))); break;
    case NanEncoding::fn: odd |= _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(static_cast<int>(k.mag_all))); break;
    case NanEncoding::fnuz:
    case NanEncoding::none: break;
  }
  if (!p.negative_zero) odd |= _mm512_cmpeq_epi32_mask(c, _mm512_set1_epi32(static_cast<int>(p.sign_bit)));
  odd &= m;
  if (odd) {
    alignas(64) uint32_t lanes[16];
    _mm512_store_si512(lanes, raw);
    for (unsigned j = 0; j < 16; ++j)
      if ((odd >> j) & 1u) out[i + j] = decode_f32(*p.format, lanes[j]);
  }
}

// IEEE binary16: vcvtph2ps is exact for every finite value and inf (fp16
// values are fp32 values); NaN lanes take the scalar reference (its payload
// policy). Saved fp16 activations and master weights decode through here.
MANTISSA_AVX512 void dequantize_fp16(const QuantPlan& p, const uint16_t* codes, float* out, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256i h = _mm256_maskz_loadu_epi16(m, codes + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(h));
    const __mmask16 nan = _mm256_mask_cmpgt_epu16_mask(m, _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF)),
                                                       _mm256_set1_epi16(0x7C00));
    if (nan)
      for (unsigned j = 0; j < 16; ++j)
        if ((nan >> j) & 1u) out[i + j] = decode_f32(*p.format, codes[i + j]);
  }
}

// bf16: the code is the top half of the fp32 bits, exact for every finite
// value and inf; NaN lanes take the scalar reference (its payload policy).
MANTISSA_AVX512 void dequantize_bf16(const QuantPlan& p, const uint16_t* codes, float* out, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256i h = _mm256_maskz_loadu_epi16(m, codes + i);
    _mm512_mask_storeu_epi32(out + i, m, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    const __mmask16 nan = _mm256_mask_cmpgt_epu16_mask(m, _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF)),
                                                       _mm256_set1_epi16(0x7F80));
    if (nan)
      for (unsigned j = 0; j < 16; ++j)
        if ((nan >> j) & 1u) out[i + j] = decode_f32(*p.format, codes[i + j]);
  }
}

}  // namespace

MANTISSA_AVX512 void dequantize_avx512(const QuantPlan& p, const void* codes, float* out, size_t n) {
  if (p.shape == Shape::fp16 && p.format->subnormals && p.format->is_signed)
    return dequantize_fp16(p, static_cast<const uint16_t*>(codes), out, n);
  if (p.shape == Shape::bf16 && p.format->subnormals)
    return dequantize_bf16(p, static_cast<const uint16_t*>(codes), out, n);
  const DecodeConsts k = decode_consts(p);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) decode16(p, k, codes, out, i, 0xFFFF);
  if (i < n) decode16(p, k, codes, out, i, static_cast<__mmask16>((1u << (n - i)) - 1));
}

}  // namespace mantissa::formats::detail
