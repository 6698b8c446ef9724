// 8-lane pieces of the FP4 casts' AVX2 path (fp4_cast_avx2.cpp), each the
// bits of its scalar counterpart in fp4_reference.cpp / fp4_internal.hpp and
// the same arithmetic as the 16-lane AVX-512 pieces (fp4_lanes.hpp): the
// counter-based draws, the E2M1 element rounding, the block-scale rule of 8
// tiles at once, the horizontal maxima of 8 vectors, masked loads and stores.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/target.hpp"
#include "formats/fp4_internal.hpp"

namespace mantissa::formats::lanes8 {

// Lanes 0 .. n-1 set (n may be <= 0 or > 8), as vmaskmovps reads a mask.
MANTISSA_AVX2 inline __m256i first(int64_t n) {
  const int c = n >= 8 ? 8 : n <= 0 ? 0 : static_cast<int>(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The first n floats of p (zeros beyond; nothing beyond is read).
MANTISSA_AVX2 inline __m256 load(const float* p, int64_t n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, first(n));
}
MANTISSA_AVX2 inline void store(float* p, int64_t n, __m256 v) {
  if (n >= 8)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, first(n), v);
}

MANTISSA_AVX2 inline __m256 abs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// |v| > the largest float or unordered (inf/NaN), as a lane mask.
MANTISSA_AVX2 inline __m256 nonfinite(__m256 a) {
  return _mm256_cmp_ps(a, _mm256_set1_ps(3.4028234663852886e38f), _CMP_NLE_UQ);
}

MANTISSA_AVX2 inline __m256i iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }

MANTISSA_AVX2 inline __m256i fmix32_8(__m256i h) {
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x85EBCA6Bu)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0xC2B2AE35u)));
  return _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
}

// detail::draw_at for indices first .. first + 7 (any first).
MANTISSA_AVX2 inline __m256i draws8(detail::DrawKey k, uint64_t first) {
  const __m256i base = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(first)));
  const __m256i lo = _mm256_add_epi32(base, iota());
  // lo < base unsigned: the low half wrapped, the upper one carries
  const __m256i flip = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i carry =
      _mm256_cmpgt_epi32(_mm256_xor_si256(base, flip), _mm256_xor_si256(lo, flip));
  const __m256i hi = _mm256_sub_epi32(
      _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(first >> 32))), carry);
  const __m256i a =
      _mm256_mullo_epi32(_mm256_add_epi32(lo, _mm256_set1_epi32(static_cast<int>(k.lo))),
                         _mm256_set1_epi32(static_cast<int>(0x9E3779B1u)));
  const __m256i b =
      _mm256_add_epi32(_mm256_mullo_epi32(hi, _mm256_set1_epi32(static_cast<int>(0x85EBCA77u))),
                       _mm256_set1_epi32(static_cast<int>(k.hi)));
  return _mm256_srli_epi32(fmix32_8(_mm256_xor_si256(a, b)), 8);
}

// The draws of a run of indices first .. first + n - 1 that share their upper
// 32 bits, 8 at a time (as lanes::DrawRun).
struct DrawRun {
  __m256i next;  // low halves + the key's low word, lanes 0..7
  __m256i upper;
};
inline bool shares_upper(uint64_t first, int64_t n) {
  return (first >> 32) == ((first + static_cast<uint64_t>(n) + 7) >> 32);
}
MANTISSA_AVX2 inline DrawRun draw_run(detail::DrawKey k, uint64_t first) {
  const uint32_t hi = static_cast<uint32_t>(first >> 32);
  return {_mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(first) + k.lo)),
                           iota()),
          _mm256_set1_epi32(static_cast<int>(hi * 0x85EBCA77u + k.hi))};
}
MANTISSA_AVX2 inline __m256i draws8(DrawRun& r) {
  const __m256i a = _mm256_mullo_epi32(r.next, _mm256_set1_epi32(static_cast<int>(0x9E3779B1u)));
  r.next = _mm256_add_epi32(r.next, _mm256_set1_epi32(8));
  return _mm256_srli_epi32(fmix32_8(_mm256_xor_si256(a, r.upper)), 8);
}

struct Rounded {
  __m256i codes;  // E2M1 codes in the low byte of each lane
  __m256 value;   // signed E2M1 value
};

// E2M1 codes of y (finite), nearest-even or stochastic with `draw` (24 bits):
// the binade of |y| (below 2, below 4, up to 6) gives the spacing, k =
// |y| / spacing rounded to an integer, value k x spacing, code k + offset.
template <bool Stochastic>
MANTISSA_AVX2 inline Rounded round8(__m256 y, __m256i draw) {
  const __m256i sign =
      _mm256_and_si256(_mm256_castps_si256(y), _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256 a = _mm256_min_ps(abs(y), _mm256_set1_ps(6.0f));
  const __m256 b0 = _mm256_cmp_ps(a, _mm256_set1_ps(2.0f), _CMP_LT_OQ);
  const __m256 b01 = _mm256_cmp_ps(a, _mm256_set1_ps(4.0f), _CMP_LT_OQ);
  const __m256 inv = _mm256_blendv_ps(
      _mm256_blendv_ps(_mm256_set1_ps(0.5f), _mm256_set1_ps(1.0f), b01), _mm256_set1_ps(2.0f), b0);
  const __m256 ulp = _mm256_blendv_ps(
      _mm256_blendv_ps(_mm256_set1_ps(2.0f), _mm256_set1_ps(1.0f), b01), _mm256_set1_ps(0.5f), b0);
  // offset 4 (from 4), 2 (from 2), 0 (below 2)
  const __m256i off = _mm256_andnot_si256(
      _mm256_castps_si256(b0),
      _mm256_blendv_epi8(_mm256_set1_epi32(4), _mm256_set1_epi32(2), _mm256_castps_si256(b01)));
  const __m256 kf = _mm256_mul_ps(a, inv);  // exact: a power-of-two factor
  __m256 k;
  if constexpr (!Stochastic) {
    k = _mm256_round_ps(kf, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    const __m256 fl = _mm256_round_ps(kf, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(draw), _mm256_set1_ps(0x1p-24f));
    const __m256 up = _mm256_cmp_ps(_mm256_sub_ps(kf, fl), u, _CMP_GT_OQ);
    k = _mm256_add_ps(fl, _mm256_and_ps(up, _mm256_set1_ps(1.0f)));
  }
  Rounded r;
  r.codes =
      _mm256_or_si256(_mm256_add_epi32(_mm256_cvttps_epi32(k), off), _mm256_srli_epi32(sign, 28));
  r.value = _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(_mm256_mul_ps(k, ulp)), sign));
  return r;
}

// The low bytes of 8 lanes, in order (8 bytes).
MANTISSA_AVX2 inline uint64_t bytes8(__m256i v) {
  const __m256i pick =
      _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i s = _mm256_shuffle_epi8(v, pick);
  return static_cast<uint32_t>(_mm256_cvtsi256_si32(s)) |
         uint64_t{static_cast<uint32_t>(_mm_cvtsi128_si32(_mm256_extracti128_si256(s, 1)))} << 32;
}

// Codes of 8 lanes two per byte (even lane low): 4 bytes.
MANTISSA_AVX2 inline uint32_t pack8(__m256i codes) {
  const __m256i t = _mm256_or_si256(codes, _mm256_srli_epi64(codes, 28));
  const __m256i pick =
      _mm256_setr_epi8(0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 8, -1, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i s = _mm256_shuffle_epi8(t, pick);
  return (static_cast<uint32_t>(_mm256_cvtsi256_si32(s)) & 0xFFFF) |
         static_cast<uint32_t>(_mm_cvtsi128_si32(_mm256_extracti128_si256(s, 1))) << 16;
}

// The top 16 bits of 8 floats (their bf16 bits, truncated), in order.
MANTISSA_AVX2 inline __m128i top16(__m256 v) {
  const __m256i s = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(s, s), 0x08));
}

// The first n (<= 8) of `bytes` bytes / 16-bit values to p.
inline void store_bytes(uint8_t* p, int64_t n, uint64_t bytes) {
  std::memcpy(p, &bytes, static_cast<size_t>(n));
}
MANTISSA_AVX2 inline void store16(uint16_t* p, int64_t n, __m128i v) {
  if (n >= 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
    return;
  }
  alignas(16) uint16_t buf[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(buf), v);
  std::memcpy(p, buf, static_cast<size_t>(n) * 2);
}

// 2^k for integer lanes k in [-127, 127] (2^-127 is subnormal), exactly.
MANTISSA_AVX2 inline __m256 pow2(__m256i k) {
  const __m256i normal = _mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23);
  const __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(-126), k);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, _mm256_set1_epi32(0x00400000), tiny));
}

// The block-scale rule of formats/fp4.hpp for 8 tiles with largest
// magnitudes amax (>= 0; lanes holding inf/NaN give some result without
// trapping): the scale code, the factor the elements are divided by (nvfp4:
// t x s) or multiplied by (mxfp4: 2^-e), the scale s.
struct Scales {
  __m256i code;
  __m256 factor, block;
};
MANTISSA_AVX2 inline Scales scales8(bool nv, __m256 amax, float t) {
  Scales r;
  if (nv) {  // s = e4m3_rne(clamp((amax / 6) / t, 2^-9, 448))
    __m256 v = _mm256_div_ps(_mm256_div_ps(amax, _mm256_set1_ps(6.0f)), _mm256_set1_ps(t));
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(0x1p-9f)), _mm256_set1_ps(448.0f));
    // Below 2^-6 (E4M3's subnormals): multiples of 2^-9, code = the multiple.
    const __m256 sub = _mm256_cmp_ps(v, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ);
    const __m256 q = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(512.0f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // Normal: round the fp32 bits to 3 mantissa bits, ties to even.
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 20), _mm256_set1_epi32(1));
    const __m256i b =
        _mm256_and_si256(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFFF), odd)),
                         _mm256_set1_epi32(static_cast<int>(0xFFF00000u)));
    const __m256i normal = _mm256_or_si256(
        _mm256_slli_epi32(_mm256_sub_epi32(_mm256_srli_epi32(b, 23), _mm256_set1_epi32(120)), 3),
        _mm256_and_si256(_mm256_srli_epi32(b, 20), _mm256_set1_epi32(7)));
    r.code = _mm256_blendv_epi8(normal, _mm256_cvttps_epi32(q), _mm256_castps_si256(sub));
    r.block =
        _mm256_blendv_ps(_mm256_castsi256_ps(b), _mm256_mul_ps(q, _mm256_set1_ps(0x1p-9f)), sub);
    r.factor = _mm256_mul_ps(_mm256_set1_ps(t), r.block);
  } else {  // e = clamp(floor(log2 amax) - 2, -127, 127), -127 for amax 0 and subnormals; s = 2^e
    const __m256i field =
        _mm256_srli_epi32(_mm256_castps_si256(amax), 23);  // amax >= 0: the exponent field
    const __m256i e = _mm256_max_epi32(
        _mm256_min_epi32(_mm256_sub_epi32(field, _mm256_set1_epi32(129)), _mm256_set1_epi32(127)),
        _mm256_set1_epi32(-127));
    r.code = _mm256_add_epi32(e, _mm256_set1_epi32(127));
    r.block = pow2(e);
    r.factor = pow2(_mm256_sub_epi32(_mm256_setzero_si256(), e));
  }
  return r;
}

// Lane k: the largest lane of v[k].
MANTISSA_AVX2 inline __m256 hmax8(const __m256* v) {
  __m256 a[4], b[2];
  for (int p = 0; p < 4; ++p)  // low half: v[2p]'s four partial maxima, high half: v[2p+1]'s
    a[p] = _mm256_max_ps(_mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x20),
                         _mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x31));
  for (int p = 0; p < 2; ++p)  // per half: two of one vector, two of another
    b[p] = _mm256_max_ps(_mm256_shuffle_ps(a[2 * p], a[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(a[2 * p], a[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // low half: v0, v2, v4, v6's maxima; high half: v1, v3, v5, v7's
  const __m256 m = _mm256_max_ps(_mm256_shuffle_ps(b[0], b[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(b[0], b[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(m, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

}  // namespace mantissa::formats::lanes8
