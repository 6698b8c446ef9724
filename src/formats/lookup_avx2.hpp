// Internal to the AVX2 kernels: the byte -> 16-bit table lookup of 32 codes
// in registers (vpshufb), and the fp32 fold of 16 bf16 values after it.
//
// vpshufb looks up 16 bytes per 128-bit lane from the low 4 bits of each
// index byte, and gives zero where the index byte has bit 7 set. A 256-entry
// table of 16-bit entries is kept as 16 groups (the codes' high nibble) of
// two byte planes (low and high bytes of the entries), each 16 bytes
// broadcast to both lanes. Group h is looked up with the index
// (x - 16h) +sat 0x70: codes of group h map to 0x70..0x7F, every other code
// to 0x80 or above (zero), so OR-ing the groups' results gives each code's
// entry.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "cpu/target.hpp"
#include "mantissa/formats/lookup.hpp"

namespace mantissa::formats::avx2 {

struct TablePlanes {
  __m256i lo[16], hi[16];  // group h: entries 16h .. 16h + 15, low and high bytes
};

MANTISSA_AVX2 inline TablePlanes load_planes(const Table16& table) {
  TablePlanes p;
  // Per 128-bit lane: the even bytes (low bytes of 8 entries) then the odd ones.
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2,
                                         4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int h = 0; h < 16; ++h) {
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(table.data() + 16 * h));
    // [lo 0-7, hi 0-7 | lo 8-15, hi 8-15] -> [lo 0-15 | hi 0-15]
    const __m256i s = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(e, split), 0xD8);
    p.lo[h] = _mm256_permute2x128_si256(s, s, 0x00);
    p.hi[h] = _mm256_permute2x128_si256(s, s, 0x11);
  }
  return p;
}

// The low and high bytes of the entries of 32 codes (byte lanes), from the
// first `groups` groups (8 when every code is below 128, else 16).
struct Planes {
  __m256i lo, hi;
};
template <int Groups>
MANTISSA_AVX2 [[gnu::always_inline]] inline Planes lookup_planes(const TablePlanes& t, __m256i x) {
  Planes r{_mm256_setzero_si256(), _mm256_setzero_si256()};
  const __m256i sat = _mm256_set1_epi8(0x70), step = _mm256_set1_epi8(0x10);
  for (int h = 0; h < Groups; ++h) {
    const __m256i idx = _mm256_adds_epu8(x, sat);
    r.lo = _mm256_or_si256(r.lo, _mm256_shuffle_epi8(t.lo[h], idx));
    r.hi = _mm256_or_si256(r.hi, _mm256_shuffle_epi8(t.hi[h], idx));
    x = _mm256_sub_epi8(x, step);
  }
  return r;
}

// 32 codes with their 64-bit quarters in the order 0, 2, 1, 3 (what
// order_codes gives): the entries of codes 0..15 (first) and 16..31
// (second) in 16-bit lanes, in order.
struct Entries {
  __m256i first, second;
};
MANTISSA_AVX2 inline __m256i order_codes(__m256i x) { return _mm256_permute4x64_epi64(x, 0xD8); }
MANTISSA_AVX2 inline Entries interleave(Planes p) {
  return {_mm256_unpacklo_epi8(p.lo, p.hi), _mm256_unpackhi_epi8(p.lo, p.hi)};
}

// The entries of 32 codes (loaded as they lie in memory) from the full table.
MANTISSA_AVX2 inline Entries lookup32(const TablePlanes& t, __m256i codes) {
  return interleave(lookup_planes<16>(t, order_codes(codes)));
}

// 8 bf16 values (16-bit lanes of an xmm) widened to fp32.
MANTISSA_AVX2 inline __m256 widen8(__m128i d) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(d), 16));
}

// 16 bf16 values (16-bit lanes) times f0 (elements 0..7) and f1 (8..15):
// the top 16 bits of each fp32 product, as the scalar fold gives.
MANTISSA_AVX2 inline __m256i fold16(__m256i d, __m256 f0, __m256 f1) {
  const __m256i p0 = _mm256_srli_epi32(
      _mm256_castps_si256(_mm256_mul_ps(widen8(_mm256_castsi256_si128(d)), f0)), 16);
  const __m256i p1 = _mm256_srli_epi32(
      _mm256_castps_si256(_mm256_mul_ps(widen8(_mm256_extracti128_si256(d, 1)), f1)), 16);
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(p0, p1), 0xD8);
}

}  // namespace mantissa::formats::avx2
