// Internal helpers of the AVX-512 conversion kernels (convert_avx512*.cpp):
// target attributes, tail masks, code stores of 1/2/4 bytes, the stochastic
// draws.
#pragma once

// GCC 12's AVX-512 intrinsics initialise their undefined-vector placeholder
// from itself, which -W(maybe-)uninitialized reports after inlining.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "formats/convert_plan.hpp"

#define MANTISSA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define MANTISSA_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace mantissa::formats::detail {

// Lane mask of the first min(left, 16) lanes of a 16-lane step.
inline __mmask16 tail_mask16(size_t left) {
  return left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
}

// Lane masks of a 32-element step done as two 16-lane halves (lo: elements
// 0..15, hi: 16..31) when only the first `left` elements exist.
struct TailMask32 {
  __mmask16 lo, hi;
  __mmask32 both() const { return static_cast<__mmask32>(lo) | (static_cast<__mmask32>(hi) << 16); }
};
inline TailMask32 tail_mask32(size_t left) { return {tail_mask16(left), tail_mask16(left > 16 ? left - 16 : 0)}; }

// How a kernel writes n codes of `bytes` bytes when streaming (QuantPlan::stream):
// elements [head, body_end) cover whole 64-byte lines of the destination and
// go out with non-temporal stores (which need aligned addresses and write a
// line without reading it first); [0, head) and [body_end, n) use ordinary
// masked stores. Without streaming, or when the destination is not aligned to
// the code size (no element boundary is 64-byte aligned), everything is head.
struct StreamSplit {
  size_t head = 0, body_end = 0;
  bool streams() const { return body_end > head; }
};
inline StreamSplit stream_split(bool stream, const void* codes, size_t bytes, size_t n) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(codes);
  if (!stream || addr % bytes != 0) return {n, n};
  const size_t per_line = 64 / bytes;
  const size_t head = std::min(n, (64 - addr % 64) % 64 / bytes);
  return {head, head + (n - head) / per_line * per_line};
}

// Runs a kernel's stores over [0, n) split as s says: plain(i, left) writes
// the codes of elements i .. i + min(step, left) with ordinary stores,
// line(i) the 64 bytes of codes from element i with a streaming store.
// Pass lambdas with the kernel's target attribute (they inline into it).
template <class Plain, class Line>
[[gnu::always_inline]] inline void store_split(const StreamSplit& s, size_t n, size_t step, size_t line_elements,
                                               Plain plain, Line line) {
  for (size_t i = 0; i < s.head; i += step) plain(i, s.head - i);
  for (size_t i = s.head; i < s.body_end; i += line_elements) line(i);
  for (size_t i = s.body_end; i < n; i += step) plain(i, n - i);
  if (s.streams()) _mm_sfence();  // order the streaming stores before whatever the caller does next
}

// The 64 bytes lo, hi (a line of codes for a streaming store).
MANTISSA_AVX512 inline __m512i join256(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// codes[1] for lanes whose sign bit is set, codes[0] for the others.
MANTISSA_AVX512 inline __m512i by_sign(__mmask16 neg, const uint32_t (&codes)[2]) {
  return _mm512_mask_mov_epi32(_mm512_set1_epi32(static_cast<int>(codes[0])), neg,
                               _mm512_set1_epi32(static_cast<int>(codes[1])));
}

// Narrows 16 codes to the storage width and writes the lanes in `m` at
// element offset i.
MANTISSA_AVX512 inline void store_codes(int bytes, void* codes, size_t i, __m512i c, __mmask16 m) {
  if (bytes == 1) {
    _mm512_mask_cvtepi32_storeu_epi8(static_cast<uint8_t*>(codes) + i, m, c);
  } else if (bytes == 2) {
    _mm512_mask_cvtepi32_storeu_epi16(static_cast<uint16_t*>(codes) + i, m, c);
  } else {
    _mm512_mask_storeu_epi32(static_cast<uint32_t*>(codes) + i, m, c);
  }
}

// SplitMix64 finaliser on 8 lanes of 64 bits (vpmullq is AVX512DQ).
MANTISSA_AVX512 inline __m512i splitmix_finalise8(__m512i z) {
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), _mm512_set1_epi64(0xbf58476d1ce4e5b9LL));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                         _mm512_set1_epi64(static_cast<long long>(0x94d049bb133111ebULL)));
  return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

inline uint64_t splitmix_finalise(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The random bits of elements index .. index+15: the scalar stochastic_bits
// (round.cpp), mix(mix(seed) + (i + 1) * golden) >> (64 - bits), 16 at once.
// Unsigned wrap-around is the hash's arithmetic, so it is done in uint64_t.
MANTISSA_AVX512 inline __m512i stochastic_draws16(uint64_t seed, uint64_t index, int bits) {
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  const uint64_t z0 = splitmix_finalise(seed) + (index + 1) * kGolden;
  const __m512i step = _mm512_set_epi64(static_cast<long long>(7 * kGolden), static_cast<long long>(6 * kGolden),
                                        static_cast<long long>(5 * kGolden), static_cast<long long>(4 * kGolden),
                                        static_cast<long long>(3 * kGolden), static_cast<long long>(2 * kGolden),
                                        static_cast<long long>(kGolden), 0);
  const __m512i lo = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(z0)), step);
  const __m512i hi = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(z0 + 8 * kGolden)), step);
  const __m128i drop = _mm_cvtsi32_si128(64 - (bits < 32 ? bits : 32));
  const __m256i rlo = _mm512_cvtepi64_epi32(_mm512_srl_epi64(splitmix_finalise8(lo), drop));
  const __m256i rhi = _mm512_cvtepi64_epi32(_mm512_srl_epi64(splitmix_finalise8(hi), drop));
  return _mm512_inserti64x4(_mm512_castsi256_si512(rlo), rhi, 1);
}

// Stochastic round-up decision, as the scalar reference: the dropped
// fraction rem / 2^sh truncated to `bits` bits, plus a draw of `bits` random
// bits, carries into the kept part (compared without forming the sum, which
// would overflow 32 bits when bits == 32).
MANTISSA_AVX512 inline __mmask16 stochastic_up(__m512i rem, __m512i sh, __m512i random, int bits) {
  const __m512i vbits = _mm512_set1_epi32(bits);
  const __mmask16 wide = _mm512_cmpgt_epi32_mask(sh, vbits);  // more dropped bits than random bits
  const __m512i frac_wide = _mm512_srlv_epi32(rem, _mm512_sub_epi32(sh, vbits));
  const __m512i frac_narrow = _mm512_sllv_epi32(rem, _mm512_sub_epi32(vbits, sh));
  const __m512i frac = _mm512_mask_mov_epi32(frac_narrow, wide, frac_wide);
  const uint32_t all = bits >= 32 ? 0xFFFFFFFFu : (uint32_t{1} << bits) - 1;
  const __m512i limit = _mm512_sub_epi32(_mm512_set1_epi32(static_cast<int>(all)), frac);
  return _mm512_cmpgt_epu32_mask(random, limit);
}

}  // namespace mantissa::formats::detail
