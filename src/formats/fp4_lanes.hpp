// 16-lane pieces of the FP4 casts' vector path (fp4_cast.cpp), each the
// bits of its scalar counterpart in fp4_reference.cpp / fp4_internal.hpp:
// the counter-based draws, the E2M1 element rounding, the block-scale rule
// of 16 tiles at once and the horizontal maxima of 16 vectors.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "formats/fp4_internal.hpp"

#define MANTISSA_FP4_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace mantissa::formats::lanes {

// The first n lanes (n may be <= 0 or > 16).
inline __mmask16 first(int64_t n) {
  return n >= 16 ? __mmask16{0xFFFF} : n <= 0 ? __mmask16{0} : static_cast<__mmask16>((1u << n) - 1);
}

MANTISSA_FP4_AVX512 inline __m512i iota() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }

MANTISSA_FP4_AVX512 inline __m512i fmix32_16(__m512i h) {
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0x85EBCA6Bu)));
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0xC2B2AE35u)));
  return _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
}

// detail::draw_at for indices first .. first + 15 (any first).
MANTISSA_FP4_AVX512 inline __m512i draws16(detail::DrawKey k, uint64_t first) {
  const __m512i base = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(first)));
  const __m512i lo = _mm512_add_epi32(base, iota());
  const __mmask16 carry = _mm512_cmplt_epu32_mask(lo, base);
  const __m512i hi0 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(first >> 32)));
  const __m512i hi = _mm512_mask_add_epi32(hi0, carry, hi0, _mm512_set1_epi32(1));
  const __m512i a = _mm512_mullo_epi32(_mm512_add_epi32(lo, _mm512_set1_epi32(static_cast<int>(k.lo))),
                                       _mm512_set1_epi32(static_cast<int>(0x9E3779B1u)));
  const __m512i b = _mm512_add_epi32(_mm512_mullo_epi32(hi, _mm512_set1_epi32(static_cast<int>(0x85EBCA77u))),
                                     _mm512_set1_epi32(static_cast<int>(k.hi)));
  return _mm512_srli_epi32(fmix32_16(_mm512_xor_si512(a, b)), 8);
}

// The draws of a run of indices first .. first + n - 1 that share their upper
// 32 bits (the usual case: no run crosses a multiple of 2^32), 16 at a time:
// the upper half's term of the hash is the same for all of them.
struct DrawRun {
  __m512i next;  // low halves + the key's low word, lanes 0..15
  __m512i upper;
};
MANTISSA_FP4_AVX512 inline bool shares_upper(uint64_t first, int64_t n) {
  return (first >> 32) == ((first + static_cast<uint64_t>(n) + 15) >> 32);
}
MANTISSA_FP4_AVX512 inline DrawRun draw_run(detail::DrawKey k, uint64_t first) {
  const uint32_t hi = static_cast<uint32_t>(first >> 32);
  return {_mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(first) + k.lo)), iota()),
          _mm512_set1_epi32(static_cast<int>(hi * 0x85EBCA77u + k.hi))};
}
MANTISSA_FP4_AVX512 inline __m512i draws16(DrawRun& r) {
  const __m512i a = _mm512_mullo_epi32(r.next, _mm512_set1_epi32(static_cast<int>(0x9E3779B1u)));
  r.next = _mm512_add_epi32(r.next, _mm512_set1_epi32(16));
  return _mm512_srli_epi32(fmix32_16(_mm512_xor_si512(a, r.upper)), 8);
}

struct Rounded {
  __m512i codes;  // E2M1 codes in the low byte of each lane
  __m512 value;   // signed E2M1 value
};

// E2M1 codes of y (finite), nearest-even or stochastic with `draw` (24 bits).
// The binade of |y| (below 2, below 4, up to 6) gives the spacing: k =
// |y| / spacing rounded to an integer, value k x spacing, code k + offset.
template <bool Stochastic>
MANTISSA_FP4_AVX512 inline Rounded round16(__m512 y, __m512i draw) {
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512 a = _mm512_min_ps(_mm512_abs_ps(y), _mm512_set1_ps(6.0f));
  const __mmask16 b0 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.0f), _CMP_LT_OQ);
  const __mmask16 b01 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(4.0f), _CMP_LT_OQ);
  __m512 inv = _mm512_mask_blend_ps(b01, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.0f));
  inv = _mm512_mask_blend_ps(b0, inv, _mm512_set1_ps(2.0f));
  __m512 ulp = _mm512_mask_blend_ps(b01, _mm512_set1_ps(2.0f), _mm512_set1_ps(1.0f));
  ulp = _mm512_mask_blend_ps(b0, ulp, _mm512_set1_ps(0.5f));
  __m512i off = _mm512_mask_blend_epi32(b01, _mm512_set1_epi32(4), _mm512_set1_epi32(2));
  off = _mm512_mask_blend_epi32(b0, off, _mm512_setzero_si512());
  const __m512 kf = _mm512_mul_ps(a, inv);  // exact: a power-of-two factor
  __m512 k;
  if constexpr (!Stochastic) {
    k = _mm512_roundscale_ps(kf, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    const __m512 fl = _mm512_roundscale_ps(kf, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(draw), _mm512_set1_ps(0x1p-24f));
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(kf, fl), u, _CMP_GT_OQ);
    k = _mm512_mask_add_ps(fl, up, fl, _mm512_set1_ps(1.0f));
  }
  Rounded r;
  r.codes = _mm512_or_si512(_mm512_add_epi32(_mm512_cvttps_epi32(k), off), _mm512_srli_epi32(sign, 28));
  r.value = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(_mm512_mul_ps(k, ulp)), sign));
  return r;
}

// Codes of 16 lanes two per byte (even lane low): 8 bytes.
MANTISSA_FP4_AVX512 inline __m128i pack16(__m512i codes) {
  return _mm512_cvtepi64_epi8(_mm512_or_si512(codes, _mm512_srli_epi64(codes, 28)));
}

// The block-scale rule of formats/fp4.hpp for 16 tiles with largest
// magnitudes amax (>= 0; lanes holding inf/NaN give some finite-or-not
// result without trapping): the scale code, the factor the elements are
// divided by (nvfp4: t x s) or multiplied by (mxfp4: 2^-e), the scale s.
struct Scales {
  __m512i code;
  __m512 factor, block;
};
MANTISSA_FP4_AVX512 inline Scales scales16(bool nv, __m512 amax, float t) {
  Scales r;
  if (nv) {  // s = e4m3_rne(clamp((amax / 6) / t, 2^-9, 448))
    __m512 v = _mm512_div_ps(_mm512_div_ps(amax, _mm512_set1_ps(6.0f)), _mm512_set1_ps(t));
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(0x1p-9f)), _mm512_set1_ps(448.0f));
    // Below 2^-6 (E4M3's subnormals): multiples of 2^-9, code = the multiple.
    const __mmask16 sub = _mm512_cmp_ps_mask(v, _mm512_set1_ps(0x1p-6f), _CMP_LT_OQ);
    const __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(512.0f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // Normal: round the fp32 bits to 3 mantissa bits, ties to even.
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 20), _mm512_set1_epi32(1));
    const __m512i b = _mm512_and_si512(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFFF), odd)),
                                       _mm512_set1_epi32(static_cast<int>(0xFFF00000u)));
    const __m512i normal = _mm512_or_si512(
        _mm512_slli_epi32(_mm512_sub_epi32(_mm512_srli_epi32(b, 23), _mm512_set1_epi32(120)), 3),
        _mm512_and_si512(_mm512_srli_epi32(b, 20), _mm512_set1_epi32(7)));
    r.code = _mm512_mask_blend_epi32(sub, normal, _mm512_cvttps_epi32(q));
    r.block = _mm512_mask_blend_ps(sub, _mm512_castsi512_ps(b), _mm512_mul_ps(q, _mm512_set1_ps(0x1p-9f)));
    r.factor = _mm512_mul_ps(_mm512_set1_ps(t), r.block);
  } else {  // e = clamp(floor(log2 amax) - 2, -127, 127), -127 for amax 0; s = 2^e
    const __m512 e = _mm512_min_ps(
        _mm512_max_ps(_mm512_sub_ps(_mm512_getexp_ps(amax), _mm512_set1_ps(2.0f)), _mm512_set1_ps(-127.0f)),
        _mm512_set1_ps(127.0f));  // getexp: floor(log2) of normals and subnormals alike, -inf for 0
    r.code = _mm512_add_epi32(_mm512_cvttps_epi32(e), _mm512_set1_epi32(127));
    r.block = _mm512_scalef_ps(_mm512_set1_ps(1.0f), e);  // exact powers of two, 2^-127 included
    r.factor = _mm512_scalef_ps(_mm512_set1_ps(1.0f), _mm512_sub_ps(_mm512_setzero_ps(), e));
  }
  return r;
}

// Lane k: the largest lane of v[k].
MANTISSA_FP4_AVX512 inline __m512 hmax16(const __m512* v) {
  __m512 w[8], u[4], s[2];
  for (int p = 0; p < 8; ++p)  // quarters 0-1: v[2p]'s eight partial maxima, 2-3: v[2p+1]'s
    w[p] = _mm512_max_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int p = 0; p < 4; ++p)  // quarter q: v[4p+q]'s four
    u[p] = _mm512_max_ps(_mm512_shuffle_f32x4(w[2 * p], w[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[2 * p], w[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int p = 0; p < 2; ++p)  // quarter q: two of v[8p+q], two of v[8p+4+q]
    s[p] = _mm512_max_ps(_mm512_shuffle_ps(u[2 * p], u[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(u[2 * p], u[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Lane 4q + r: v[q + 4r]'s maximum.
  const __m512 m = _mm512_max_ps(_mm512_shuffle_ps(s[0], s[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), m);
}

}  // namespace mantissa::formats::lanes
