// The fused FP8 cast pass (scaled_cast.hpp) and the scan + scaled copy
// (scaled_copy.hpp) on AVX2, 16 elements a step (two 8-lane halves): the
// form of the AVX-512 pass in scaled_cast.cpp, with lane masks as vectors,
// the decode table looked up by vpgatherdd, and tails run on a zero-padded
// copy (a zero lane adds nothing to the scan: 0 is finite and 0 x mult is 0
// or NaN, never past the limit).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "formats/convert_avx2.hpp"
#include "formats/convert_avx2_round.hpp"
#include "formats/convert_avx2_small.hpp"
#include "formats/convert_avx512_fp8.hpp"

namespace mantissa::formats::detail {

namespace {

using namespace avx2;
constexpr int kFast = static_cast<int>(CastRoute::fast), kGeneric = static_cast<int>(CastRoute::generic),
              kSmall = static_cast<int>(CastRoute::small);

MANTISSA_AVX2 inline __m256 abs8(__m256 v) { return _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(v), set1(0x7FFFFFFF))); }

MANTISSA_AVX2 inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

MANTISSA_AVX2 inline int popcount8(__m256 m) { return std::popcount(static_cast<unsigned>(_mm256_movemask_ps(m))); }

// The running scan: largest |x| (vmaxps(a, m) returns m when a is NaN, as the
// scalar a > m ? a : m does), any inf/NaN, finite lanes scaled past the limit.
struct Scan8 {
  __m256 m, bad;
  int64_t beyond = 0;
};

// Adds v's lanes to st and returns v x vmult.
MANTISSA_AVX2 inline __m256 scan8(Scan8& st, __m256 v, __m256 vmult, __m256 vlimit) {
  const __m256 a = abs8(v);
  const __m256 s = _mm256_mul_ps(v, vmult);
  st.m = _mm256_max_ps(a, st.m);
  const __m256 finite = _mm256_cmp_ps(a, _mm256_set1_ps(std::numeric_limits<float>::max()), _CMP_LE_OQ);
  st.bad = _mm256_or_ps(st.bad, _mm256_cmp_ps(a, _mm256_set1_ps(std::numeric_limits<float>::max()), _CMP_NLE_UQ));
  st.beyond += popcount8(_mm256_and_ps(finite, _mm256_cmp_ps(abs8(s), vlimit, _CMP_GT_OQ)));
  return s;
}

MANTISSA_AVX2 inline ScanTotals totals(const Scan8& st, __m256 other_max, int64_t other_beyond) {
  return {hmax8(_mm256_max_ps(st.m, other_max)), _mm256_movemask_ps(st.bad) != 0, st.beyond + other_beyond};
}

// The FP8 rounder of convert_avx512_fp8.hpp on 8 lanes. The add that rounds
// runs in MXCSR's rounding mode, nearest-even unless a caller changed it (as
// the product x * mult before it does, on every path).
struct Fp8Regs8 {
  __m256i e_min, e_cap, c_offset;
  __m256 max, shift;
  __m128i code_shift;
  bool saturates;
};

MANTISSA_AVX2 inline Fp8Regs8 fp8_regs8(const Fp8Rounder& k) {
  return {set1(k.e_min), set1(k.e_cap), set1(k.c_offset), _mm256_set1_ps(k.max), _mm256_set1_ps(k.shift),
          _mm_cvtsi32_si128(k.code_shift), k.saturates};
}

// 8 finite lanes s rounded to the grid (saturated when k.saturates); `over`
// marks lanes with |s| beyond max.
MANTISSA_AVX2 inline __m256 round8_fp8(const Fp8Regs8& k, __m256 s, __m256& over) {
  const __m256i bits = _mm256_castps_si256(s);
  const __m256i sign = _mm256_and_si256(bits, set1(0x80000000u));
  __m256i e = _mm256_and_si256(bits, set1(0x7F800000));
  e = _mm256_min_epu32(_mm256_max_epu32(e, k.e_min), k.e_cap);
  const __m256 c = _mm256_castsi256_ps(_mm256_or_si256(_mm256_add_epi32(e, k.c_offset), sign));
  const __m256 t = _mm256_add_ps(s, c);
  __m256 r = _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(_mm256_sub_ps(t, c)), sign));
  over = _mm256_cmp_ps(abs8(s), k.max, _CMP_GT_OQ);
  // Saturation: the smaller magnitude of r and max, with r's sign.
  if (k.saturates) r = _mm256_or_ps(_mm256_min_ps(abs8(r), k.max), _mm256_castsi256_ps(sign));
  return r;
}

// The codes of 16 grid values (lo: elements 0..7, hi: 8..15), ordered 16-bit lanes.
MANTISSA_AVX2 inline __m256i codes16_fp8(const Fp8Regs8& k, __m256 lo, __m256 hi) {
  const __m128i hlo = _mm256_cvtps_ph(_mm256_mul_ps(lo, k.shift), _MM_FROUND_TO_NEAREST_INT);
  const __m128i hhi = _mm256_cvtps_ph(_mm256_mul_ps(hi, k.shift), _MM_FROUND_TO_NEAREST_INT);
  const __m256i h = _mm256_set_m128i(hhi, hlo);
  // Magnitude from h >> (10 - M), sign (fp16 bit 15) moved to bit 7.
  return _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi16(h, k.code_shift), _mm256_set1_epi16(0x7F)),
                         _mm256_and_si256(_mm256_srli_epi16(h, 8), _mm256_set1_epi16(0x80)));
}

// The high 16-bit halves (bf16 bits) of 16 fp32 lanes, ordered.
MANTISSA_AVX2 inline __m256i high_halves16(__m256 lo, __m256 hi) {
  return pack16(_mm256_srli_epi32(_mm256_castps_si256(lo), 16), _mm256_srli_epi32(_mm256_castps_si256(hi), 16));
}

// What the general steps use; the table is widened to 32-bit entries for
// vpgatherdd the first time a step needs it.
struct Regs {
  Scan8 scan;
  __m256 limit, shift;
  const Table16* table;
  bool table_ready = false;
  alignas(32) uint32_t table32[256];
};

struct FastState {
  Fp8Regs8 k;
  __m256 amax;
  int64_t beyond = 0;
};

// The table entries of 8 codes (32-bit lanes), folded by f when kFold.
template <bool kFold>
MANTISSA_AVX2 inline __m256i lookup8(const Regs& r, __m256i c, __m256 f) {
  __m256i d = _mm256_i32gather_epi32(reinterpret_cast<const int*>(r.table32), c, 4);
  if constexpr (kFold)
    d = _mm256_srli_epi32(_mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(d, 16)), f)), 16);
  return d;
}

// 16 elements the general way: scan, scale, round (fp16 route or integer
// rounder), store the codes and (kDecode) their table decode.
template <int kRoute, bool kDecode, bool kFold>
MANTISSA_AVX2 inline void general_step16(const QuantPlan& p, Regs& r, const float* x, __m256 m0, __m256 m1,
                                         __m256 f0, __m256 f1, uint8_t* codes, uint16_t* decoded) {
  const __m256 s0 = scan8(r.scan, _mm256_loadu_ps(x), m0, r.limit);
  const __m256 s1 = scan8(r.scan, _mm256_loadu_ps(x + 8), m1, r.limit);
  __m256i c;  // 16 codes in 16-bit lanes
  if constexpr (kRoute == kGeneric) {
    const __m256i zero = _mm256_setzero_si256();
    c = pack16(round8(p, _mm256_castps_si256(s0), zero), round8(p, _mm256_castps_si256(s1), zero));
  } else {
    c = round16_small(p, s0, s1, r.shift, r.shift);
  }
  if (codes) _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), pack8(c));
  if constexpr (kDecode) {
    if (!r.table_ready) {
      for (int j = 0; j < 256; ++j) r.table32[j] = (*r.table)[static_cast<size_t>(j)];
      r.table_ready = true;
    }
    const __m256i d0 = lookup8<kFold>(r, _mm256_cvtepu16_epi32(_mm256_castsi256_si128(c)), f0);
    const __m256i d1 = lookup8<kFold>(r, _mm256_cvtepu16_epi32(_mm256_extracti128_si256(c, 1)), f1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(decoded), pack16(d0, d1));
  }
}

// The fast route's rare general steps, out of line.
template <bool kDecode, bool kFold>
MANTISSA_AVX2 __attribute__((noinline)) void fallback_step16(const QuantPlan& p, Regs& r, const float* x, __m256 m0,
                                                             __m256 m1, __m256 f0, __m256 f1, uint8_t* codes,
                                                             uint16_t* decoded) {
  general_step16<kSmall, kDecode, kFold>(p, r, x, m0, m1, f0, f1, codes, decoded);
}

// The fast route when every scaled lane is finite (and, unless the cast
// saturates, none is past max); false, writing nothing, otherwise.
template <bool kDecode, bool kFold>
MANTISSA_AVX2 inline bool fast_step16(FastState& f, __m256 s0, __m256 s1, __m256 f0, __m256 f1, uint8_t* codes,
                                      uint16_t* decoded) {
  const __m256i a = _mm256_max_epi32(_mm256_castps_si256(abs8(s0)), _mm256_castps_si256(abs8(s1)));
  if (any(_mm256_cmpgt_epi32(a, set1(0x7F7FFFFF)))) return false;
  __m256 over0, over1;
  const __m256 v0 = round8_fp8(f.k, s0, over0), v1 = round8_fp8(f.k, s1, over1);
  const __m256 over = _mm256_or_ps(over0, over1);
  if (_mm256_movemask_ps(over) != 0) {  // rare: only when the scale lets values past max
    if (!f.k.saturates) return false;
    f.beyond += popcount8(over0) + popcount8(over1);
  }
  if (codes) _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), pack8(codes16_fp8(f.k, v0, v1)));
  if constexpr (kDecode) {
    const __m256 d0 = kFold ? _mm256_mul_ps(v0, f0) : v0, d1 = kFold ? _mm256_mul_ps(v1, f1) : v1;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(decoded), high_halves16(d0, d1));
  }
  return true;
}

template <int kRoute, bool kDecode, bool kFold>
MANTISSA_AVX2 inline void step16(const QuantPlan& p, Regs& r, FastState& f, const float* x, __m256 m0, __m256 m1,
                                 __m256 f0, __m256 f1, uint8_t* codes, uint16_t* decoded) {
  if constexpr (kRoute == kFast) {
    const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
    if (fast_step16<kDecode, kFold>(f, _mm256_mul_ps(x0, m0), _mm256_mul_ps(x1, m1), f0, f1, codes, decoded)) {
      f.amax = _mm256_max_ps(_mm256_max_ps(abs8(x0), abs8(x1)), f.amax);
      return;
    }
    fallback_step16<kDecode, kFold>(p, r, x, m0, m1, f0, f1, codes, decoded);
  } else {
    general_step16<kRoute, kDecode, kFold>(p, r, x, m0, m1, f0, f1, codes, decoded);
  }
}

// A pass keeps plan (a copy: the stores cannot alias it), Regs and
// FastState as separate locals of the run, so that only those whose address
// the out-of-line fallback takes may be clobbered by the byte stores, and
// the fast route's constants and totals stay in registers.
template <int kRoute>
MANTISSA_AVX2 inline void init(const Avx2Cast& c, QuantPlan& p, Regs& r, FastState& f) {
  p = *c.plan;
  r.scan.m = _mm256_setzero_ps();
  r.scan.bad = _mm256_setzero_ps();
  r.limit = _mm256_set1_ps(c.limit);
  r.shift = _mm256_set1_ps(kRoute != kGeneric ? std::ldexp(1.0f, -14 - c.plan->emin) : 1.0f);
  r.table = c.table;
  f.amax = _mm256_setzero_ps();
  if constexpr (kRoute == kFast) f.k = fp8_regs8(*c.fast);
}

// The steps of one pass over x, writing codes (may be null) and decoded
// (used only with kDecode).
template <int kRoute, bool kDecode, bool kFold>
struct Pass {
  const QuantPlan& p;
  Regs& r;
  FastState& f;
  uint8_t* codes;
  uint16_t* decoded;

  // Elements [i, i + len), len <= 16, with multipliers m0/m1 and folds f0/f1.
  MANTISSA_AVX2 [[gnu::always_inline]] inline void part(const float* x, size_t i, size_t len, __m256 m0, __m256 m1,
                                                        __m256 f0, __m256 f1) {
    if (len == 16) {
      step16<kRoute, kDecode, kFold>(p, r, f, x + i, m0, m1, f0, f1, codes ? codes + i : nullptr,
                                     kDecode ? decoded + i : nullptr);
      return;
    }
    alignas(32) float xp[16] = {};
    alignas(16) uint8_t cp[16];
    alignas(32) uint16_t dp[16];
    std::memcpy(xp, x + i, len * sizeof(float));
    step16<kRoute, kDecode, kFold>(p, r, f, xp, m0, m1, f0, f1, codes ? cp : nullptr, dp);
    if (codes) std::memcpy(codes + i, cp, len);
    if constexpr (kDecode) std::memcpy(decoded + i, dp, len * sizeof(uint16_t));
  }

  // Elements [i, end) with one multiplier and fold.
  MANTISSA_AVX2 [[gnu::always_inline]] inline void group(const float* x, size_t i, size_t end, float mult,
                                                         float fold) {
    const __m256 mv = _mm256_set1_ps(mult), fv = _mm256_set1_ps(fold);
    for (; i < end; i += 16) part(x, i, std::min<size_t>(16, end - i), mv, mv, fv, fv);
  }
};

template <int kRoute, bool kDecode, bool kFold>
MANTISSA_AVX2 ScanTotals run(const Avx2Cast& c, const float* x, size_t n, const float* mult, size_t group,
                             uint8_t* codes, uint16_t* decoded, const float* fold) {
  QuantPlan p;
  Regs r;
  FastState f;
  init<kRoute>(c, p, r, f);
  Pass<kRoute, kDecode, kFold> ps{p, r, f, codes, decoded};
  if (group == 1) {  // a multiplier per element
    for (size_t i = 0; i < n; i += 16) {
      const size_t len = std::min<size_t>(16, n - i);
      alignas(32) float mp[16] = {}, fp[16] = {};
      const float* mm = mult + i;
      const float* ff = kFold ? fold + i : fp;
      if (len < 16) {
        std::memcpy(mp, mm, len * sizeof(float));
        if constexpr (kFold) std::memcpy(fp, ff, len * sizeof(float));
        mm = mp;
        ff = fp;
      }
      const __m256 one = _mm256_set1_ps(1.0f);
      ps.part(x, i, len, _mm256_loadu_ps(mm), _mm256_loadu_ps(mm + 8), kFold ? _mm256_loadu_ps(ff) : one,
              kFold ? _mm256_loadu_ps(ff + 8) : one);
    }
  } else {
    for (size_t g0 = 0, g = 0; g0 < n; g0 += group, ++g)
      ps.group(x, g0, std::min(n, g0 + group), mult[g], kFold ? fold[g] : 1.0f);
  }
  return totals(r.scan, f.amax, f.beyond);
}

// The largest |x| bit pattern of x[0..len).
MANTISSA_AVX2 inline uint32_t amax_bits(const float* x, size_t len) {
  __m256i m = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= len; i += 8)
    m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), set1(0x7FFFFFFF)));
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), m);
  uint32_t a = 0;
  for (uint32_t v : lanes) a = std::max(a, v);
  for (; i < len; ++i) a = std::max(a, std::bit_cast<uint32_t>(x[i]) & 0x7FFFFFFFu);
  return a;
}

template <int kRoute, bool kDecode>
MANTISSA_AVX2 ScanTotals run_blocks(const Avx2Cast& c, const float* x, size_t n, size_t block, const BlockRule& rule,
                                    int8_t* exponents, uint8_t* codes, uint16_t* decoded) {
  QuantPlan p;
  Regs r;
  FastState f;
  init<kRoute>(c, p, r, f);
  Pass<kRoute, kDecode, kDecode> ps{p, r, f, codes, decoded};
  for (size_t b0 = 0, b = 0; b0 < n; b0 += block, ++b) {
    const size_t end = std::min(n, b0 + block);
    const int e = rule.exponent(amax_bits(x + b0, end - b0));
    exponents[b] = static_cast<int8_t>(e);
    ps.group(x, b0, end, exp2_block(-e), exp2_block(e));
  }
  return totals(r.scan, f.amax, f.beyond);
}

using RunFn = ScanTotals (*)(const Avx2Cast&, const float*, size_t, const float*, size_t, uint8_t*, uint16_t*,
                             const float*);
using BlocksFn = ScanTotals (*)(const Avx2Cast&, const float*, size_t, size_t, const BlockRule&, int8_t*, uint8_t*,
                                uint16_t*);

template <int kRoute>
RunFn pick_run(bool decode, bool fold) {
  if (!decode) return run<kRoute, false, false>;
  return fold ? run<kRoute, true, true> : run<kRoute, true, false>;
}

template <int kRoute>
BlocksFn pick_blocks(bool decode) {
  return decode ? run_blocks<kRoute, true> : run_blocks<kRoute, false>;
}

}  // namespace

ScanTotals cast_avx2(const Avx2Cast& c, const float* x, size_t n, const float* mult, size_t group, uint8_t* codes,
                     uint16_t* decoded, const float* fold) {
  const bool dec = decoded != nullptr, fo = dec && fold != nullptr;
  switch (c.route) {
    case CastRoute::fast: return pick_run<kFast>(dec, fo)(c, x, n, mult, group, codes, decoded, fold);
    case CastRoute::small: return pick_run<kSmall>(dec, fo)(c, x, n, mult, group, codes, decoded, fold);
    default: return pick_run<kGeneric>(dec, fo)(c, x, n, mult, group, codes, decoded, fold);
  }
}

ScanTotals cast_blocks_avx2(const Avx2Cast& c, const float* x, size_t n, size_t block, const BlockRule& rule,
                            int8_t* exponents, uint8_t* codes, uint16_t* decoded) {
  const bool dec = decoded != nullptr;
  switch (c.route) {
    case CastRoute::fast: return pick_blocks<kFast>(dec)(c, x, n, block, rule, exponents, codes, decoded);
    case CastRoute::small: return pick_blocks<kSmall>(dec)(c, x, n, block, rule, exponents, codes, decoded);
    default: return pick_blocks<kGeneric>(dec)(c, x, n, block, rule, exponents, codes, decoded);
  }
}

MANTISSA_AVX2 ScanTotals scaled_copy_avx2(const float* x, float* out, size_t n, float mult, float limit) {
  const __m256 vmult = _mm256_set1_ps(mult), vlimit = _mm256_set1_ps(limit);
  Scan8 st{_mm256_setzero_ps(), _mm256_setzero_ps()};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 s = scan8(st, _mm256_loadu_ps(x + i), vmult, vlimit);
    if (out) _mm256_storeu_ps(out + i, s);
  }
  if (i < n) {
    alignas(32) float pad[8] = {}, res[8];
    std::memcpy(pad, x + i, (n - i) * sizeof(float));
    _mm256_store_ps(res, scan8(st, _mm256_load_ps(pad), vmult, vlimit));
    if (out) std::memcpy(out + i, res, (n - i) * sizeof(float));
  }
  return totals(st, _mm256_setzero_ps(), 0);
}

MANTISSA_AVX2 void column_amax_avx2(const float* x, size_t n, uint32_t* acc) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), set1(0x7FFFFFFF));
    auto* dst = reinterpret_cast<__m256i*>(acc + i);
    _mm256_storeu_si256(dst, _mm256_max_epu32(a, _mm256_loadu_si256(dst)));
  }
  for (; i < n; ++i) acc[i] = std::max(acc[i], std::bit_cast<uint32_t>(x[i]) & 0x7FFFFFFFu);
}

}  // namespace mantissa::formats::detail
