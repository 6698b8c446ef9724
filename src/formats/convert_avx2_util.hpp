// Internal helpers of the AVX2 conversion kernels (convert_avx2*.cpp,
// scaled_cast.cpp, scaled_copy.cpp, convert_mx.cpp): unsigned compares,
// lane narrowing, code stores of 1/2/4 bytes, and the stochastic draws.
// AVX2 has no mask registers: a lane mask is a vector whose lanes are all
// ones or all zeros, and tails go through a small zero-padded buffer.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/target.hpp"
#include "formats/convert_plan.hpp"

namespace mantissa::formats::detail::avx2 {

MANTISSA_AVX2 inline __m256i set1(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }

// a > b as unsigned 32-bit lanes (AVX2 compares signed only).
MANTISSA_AVX2 inline __m256i cmpgt_u32(__m256i a, __m256i b) {
  const __m256i flip = set1(0x80000000u);
  return _mm256_cmpgt_epi32(_mm256_xor_si256(a, flip), _mm256_xor_si256(b, flip));
}

MANTISSA_AVX2 inline __m256i is_zero32(__m256i a) { return _mm256_cmpeq_epi32(a, _mm256_setzero_si256()); }
MANTISSA_AVX2 inline __m256i not_mask(__m256i m) { return _mm256_xor_si256(m, _mm256_set1_epi32(-1)); }
// where m: b, else a.
MANTISSA_AVX2 inline __m256i blend(__m256i a, __m256i b, __m256i m) { return _mm256_blendv_epi8(a, b, m); }
MANTISSA_AVX2 inline bool any(__m256i m) { return _mm256_testz_si256(m, m) == 0; }

// The 32-bit lanes lo[0..7], hi[0..7] (values below 2^16) as 16 ordered
// 16-bit lanes.
MANTISSA_AVX2 inline __m256i pack16(__m256i lo, __m256i hi) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
}
// Lane masks of two 8-lane halves as one 16-lane mask (16-bit lanes).
MANTISSA_AVX2 inline __m256i pack_mask16(__m256i lo, __m256i hi) {
  return _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
}
// 16 ordered 16-bit lanes (values below 256) as 16 bytes.
MANTISSA_AVX2 inline __m128i pack8(__m256i c16) {
  return _mm_packus_epi16(_mm256_castsi256_si128(c16), _mm256_extracti128_si256(c16, 1));
}

// Narrows 8 codes to the storage width and writes them at element i.
MANTISSA_AVX2 inline void store_codes8(int bytes, void* codes, size_t i, __m256i c) {
  const __m128i c16 = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
  if (bytes == 1) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(static_cast<uint8_t*>(codes) + i), _mm_packus_epi16(c16, c16));
  } else if (bytes == 2) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(codes) + i), c16);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint32_t*>(codes) + i), c);
  }
}

// codes[1] for lanes whose sign bit is set in `neg`, codes[0] for the others.
MANTISSA_AVX2 inline __m256i by_sign(__m256i neg, const uint32_t (&codes)[2]) {
  return blend(set1(codes[0]), set1(codes[1]), neg);
}

// The low 64 bits of a * b per 64-bit lane (AVX2 has 32 x 32 -> 64 only).
MANTISSA_AVX2 inline __m256i mullo64(__m256i a, uint64_t b) {
  const __m256i blo = _mm256_set1_epi64x(static_cast<long long>(b & 0xFFFFFFFFu));
  const __m256i bhi = _mm256_set1_epi64x(static_cast<long long>(b >> 32));
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), blo), _mm256_mul_epu32(a, bhi));
  return _mm256_add_epi64(_mm256_mul_epu32(a, blo), _mm256_slli_epi64(cross, 32));
}

// SplitMix64 finaliser on 4 lanes of 64 bits.
MANTISSA_AVX2 inline __m256i splitmix_finalise4(__m256i z) {
  z = mullo64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), 0xbf58476d1ce4e5b9ULL);
  z = mullo64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), 0x94d049bb133111ebULL);
  return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

inline uint64_t splitmix_finalise(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The random bits of elements index .. index+7, as the scalar
// stochastic_bits (round.cpp): mix(mix(seed) + (i + 1) * golden) >> (64 - bits).
MANTISSA_AVX2 inline __m256i stochastic_draws8(uint64_t seed, uint64_t index, int bits) {
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  const uint64_t z0 = splitmix_finalise(seed) + (index + 1) * kGolden;
  const __m256i step = _mm256_setr_epi64x(0, static_cast<long long>(kGolden), static_cast<long long>(2 * kGolden),
                                          static_cast<long long>(3 * kGolden));
  const __m256i lo = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<long long>(z0)), step);
  const __m256i hi = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<long long>(z0 + 4 * kGolden)), step);
  const __m128i drop = _mm_cvtsi32_si128(64 - (bits < 32 ? bits : 32));
  const __m256i rlo = _mm256_srl_epi64(splitmix_finalise4(lo), drop);
  const __m256i rhi = _mm256_srl_epi64(splitmix_finalise4(hi), drop);
  // The low 32 bits of each 64-bit lane, lo's four then hi's.
  const __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  const __m256i a = _mm256_permutevar8x32_epi32(rlo, idx), b = _mm256_permutevar8x32_epi32(rhi, idx);
  return _mm256_blend_epi32(a, b, 0xF0);
}

// Stochastic round-up decision, as the scalar reference: the dropped
// fraction rem / 2^sh truncated to `bits` bits, plus `bits` random bits,
// carries into the kept part (compared without forming the sum).
MANTISSA_AVX2 inline __m256i stochastic_up(__m256i rem, __m256i sh, __m256i random, int bits) {
  const __m256i vbits = _mm256_set1_epi32(bits);
  const __m256i wide = _mm256_cmpgt_epi32(sh, vbits);
  const __m256i frac_wide = _mm256_srlv_epi32(rem, _mm256_sub_epi32(sh, vbits));
  const __m256i frac_narrow = _mm256_sllv_epi32(rem, _mm256_sub_epi32(vbits, sh));
  const __m256i frac = blend(frac_narrow, frac_wide, wide);
  const uint32_t all = bits >= 32 ? 0xFFFFFFFFu : (uint32_t{1} << bits) - 1;
  return cmpgt_u32(random, _mm256_sub_epi32(set1(all), frac));
}

}  // namespace mantissa::formats::detail::avx2
