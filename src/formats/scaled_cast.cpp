// The fused FP8 cast pass of formats/scaled_cast.hpp.
#include "mantissa/formats/scaled_cast.hpp"
#include "mantissa/cpu/isa.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "formats/convert_avx2.hpp"
#include "formats/convert_avx512_fp8.hpp"
#include "formats/convert_avx512_lookup.hpp"
#include "formats/convert_avx512_round.hpp"
#include "formats/convert_avx512_scan.hpp"
#include "formats/convert_avx512_small.hpp"
#include "formats/convert_avx512_tree.hpp"
#include "formats/convert_plan.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/round.hpp"

namespace mantissa::formats {

namespace detail {
// What a ScaledCast fixes at construction.
struct CastState {
  Format format;
  QuantPlan plan;     // plan.format points at `format`
  Fp8Rounder fast;
  const Table16* table = nullptr;
  CastRoute route = CastRoute::scalar;
  float limit = 0;    // the format's max
};
}  // namespace detail

namespace {

using detail::CastRoute;
using detail::CastState;
using detail::TailMask32;
constexpr int kFast = static_cast<int>(CastRoute::fast), kSmall = static_cast<int>(CastRoute::small),
              kGeneric = static_cast<int>(CastRoute::generic);

uint32_t abs_bits(float v) { return std::bit_cast<uint32_t>(v) & 0x7FFFFFFFu; }

uint16_t fold_scalar(uint16_t bits, float fold) {
  const float v = std::bit_cast<float>(static_cast<uint32_t>(bits) << 16) * fold;
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
}

// Element by element, as scaled_copy_scalar, quantize_scalar and
// lookup16_scalar do in turn.
ScanTotals run_scalar(const CastState& s, const float* x, size_t n, const float* mult, size_t group, uint8_t* codes,
                      uint16_t* decoded, const float* fold) {
  ScanTotals t;
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    const float v = x[i] * mult[i / group];
    t.amax = a > t.amax ? a : t.amax;
    const bool finite = a <= std::numeric_limits<float>::max();
    t.nonfinite = t.nonfinite || !finite;
    t.beyond += finite && std::fabs(v) > s.limit;
    const auto code = static_cast<uint8_t>(encode(s.format, v, s.plan.opt, i));
    if (codes) codes[i] = code;
    const uint16_t d = (*s.table)[code];
    if (decoded) decoded[i] = fold ? fold_scalar(d, fold[i / group]) : d;
  }
  return t;
}

ScanTotals add(ScanTotals t, const ScanTotals& s) {
  t.amax = s.amax > t.amax ? s.amax : t.amax;
  t.nonfinite = t.nonfinite || s.nonfinite;
  t.beyond += s.beyond;
  return t;
}

// What the general steps of a vector pass use (the fast route's loop keeps
// FastState instead, so that only its constants compete for registers).
struct Regs {
  detail::Lanes16 scan;
  __m512 limit;
  __m512 shift;  // 2^small_route_shift (fp16 route)
  detail::Table16Regs table;
};

// The fast route's constants and running totals: locals of the pass whose
// address never leaves inlined code, so the byte stores (which may alias any
// memory) do not force them out of registers.
struct FastState {
  detail::Fp8Regs k;
  __m512 amax;
  int64_t beyond = 0;
};

// The high 16-bit halves of 32-bit lanes (bf16 bits of fp32 values), lo's
// 16 lanes then hi's.
MANTISSA_AVX512 inline __m512i high_halves32(__m512i lo, __m512i hi) {
  alignas(64) static const uint16_t idx[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
                                               33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  return _mm512_permutex2var_epi16(lo, _mm512_load_si512(idx), hi);
}

// kFast, when every lane of the step is finite after scaling (and, unless
// the cast saturates, none goes past max): codes and decode from the fp32
// rounder, and the lanes past max counted into f.beyond. Finite scaled
// lanes come from finite x, so the scan's inf/NaN check is not needed here.
// Returns false, writing nothing, otherwise.
template <bool kDecode, bool kFold>
MANTISSA_AVX512 inline bool fast_step32(FastState& f, __m512 slo, __m512 shi, size_t i, TailMask32 m, __m512 flo,
                                        __m512 fhi, uint8_t* codes, uint16_t* decoded) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i amax = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(slo), abs_mask),
                                        _mm512_and_si512(_mm512_castps_si512(shi), abs_mask));
  if (_mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(0x7F800000)) != 0) return false;
  __mmask16 over_lo, over_hi;
  const __m512 vlo = detail::round16_fp8(f.k, slo, over_lo), vhi = detail::round16_fp8(f.k, shi, over_hi);
  if ((over_lo | over_hi) != 0) {  // rare: only when the scale lets values past max
    if (!f.k.saturates) return false;
    f.beyond += std::popcount(static_cast<unsigned>(over_lo)) + std::popcount(static_cast<unsigned>(over_hi));
  }
  if (codes) _mm256_mask_storeu_epi8(codes + i, m.both(), _mm512_cvtepi16_epi8(detail::codes32_fp8(f.k, vlo, vhi)));
  if constexpr (kDecode) {
    const __m512 dlo = kFold ? _mm512_mul_ps(vlo, flo) : vlo, dhi = kFold ? _mm512_mul_ps(vhi, fhi) : vhi;
    _mm512_mask_storeu_epi16(decoded + i, m.both(), high_halves32(_mm512_castps_si512(dlo), _mm512_castps_si512(dhi)));
  }
  return true;
}

// Elements [i, i + 32) in m, the general way: scan, scale by mlo/mhi, round
// (fp16 route or integer rounder), store the codes and (kDecode) their table
// decode folded by flo/fhi (kFold).
template <int kRoute, bool kDecode, bool kFold>
MANTISSA_AVX512 inline void general_step32(const detail::QuantPlan& p, Regs& r, const float* x, size_t i,
                                           TailMask32 m, __m512 mlo, __m512 mhi, __m512 flo, __m512 fhi,
                                           uint8_t* codes, uint16_t* decoded) {
  const __m512 slo = detail::scan16(r.scan, _mm512_maskz_loadu_ps(m.lo, x + i), m.lo, mlo, r.limit);
  const __m512 shi = detail::scan16(r.scan, _mm512_maskz_loadu_ps(m.hi, x + i + 16), m.hi, mhi, r.limit);
  __m512i c;  // 32 codes in 16-bit lanes
  if constexpr (kRoute == kGeneric) {
    const __m512i zero = _mm512_setzero_si512();
    const __m256i clo = _mm512_cvtepi32_epi16(detail::round16(p, _mm512_castps_si512(slo), zero));
    const __m256i chi = _mm512_cvtepi32_epi16(detail::round16(p, _mm512_castps_si512(shi), zero));
    c = _mm512_inserti64x4(_mm512_castsi256_si512(clo), chi, 1);
  } else {
    c = detail::round32_small(p, slo, shi, r.shift);
  }
  if (codes) _mm256_mask_storeu_epi8(codes + i, m.both(), _mm512_cvtepi16_epi8(c));
  if constexpr (kDecode) {
    __m512i d = detail::lookup32(r.table, c);
    if constexpr (kFold) d = detail::fold32(d, flo, fhi);
    _mm512_mask_storeu_epi16(decoded + i, m.both(), d);
  }
}

// The fast route's rare general steps, out of line.
template <bool kDecode, bool kFold>
MANTISSA_AVX512 __attribute__((noinline)) void fallback_step32(const detail::QuantPlan& p, Regs& r, const float* x,
                                                               size_t i, TailMask32 m, __m512 mlo, __m512 mhi,
                                                               __m512 flo, __m512 fhi, uint8_t* codes,
                                                               uint16_t* decoded) {
  general_step32<kSmall, kDecode, kFold>(p, r, x, i, m, mlo, mhi, flo, fhi, codes, decoded);
}

// Elements [i, i + 32) in m: the fast rounder with the scan reduced to the
// running max (lanes outside m load as 0), else the general step.
template <int kRoute, bool kDecode, bool kFold>
MANTISSA_AVX512 inline void step32(const detail::QuantPlan& p, Regs& r, FastState& f, const float* x, size_t i,
                                   TailMask32 m, __m512 mlo, __m512 mhi, __m512 flo, __m512 fhi, uint8_t* codes,
                                   uint16_t* decoded) {
  if constexpr (kRoute == kFast) {
    const __m512 xlo = _mm512_maskz_loadu_ps(m.lo, x + i), xhi = _mm512_maskz_loadu_ps(m.hi, x + i + 16);
    if (fast_step32<kDecode, kFold>(f, _mm512_mul_ps(xlo, mlo), _mm512_mul_ps(xhi, mhi), i, m, flo, fhi, codes,
                                    decoded)) {
      f.amax = _mm512_max_ps(_mm512_max_ps(_mm512_abs_ps(xlo), _mm512_abs_ps(xhi)), f.amax);
      return;
    }
    fallback_step32<kDecode, kFold>(p, r, x, i, m, mlo, mhi, flo, fhi, codes, decoded);
  } else {
    general_step32<kRoute, kDecode, kFold>(p, r, x, i, m, mlo, mhi, flo, fhi, codes, decoded);
  }
}

// BlockRule::exponent of 16 amaxes (fp32 bits) at once.
MANTISSA_AVX512 inline __m512i block_exponents16(const BlockRule& rule, __m512i amax) {
  const __mmask16 special = _mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(0x7F800000));
  const __mmask16 zero = _mm512_testn_epi32_mask(amax, amax);
  // fp32 subnormals are normalised by the int -> float conversion (exact
  // below 2^23); their exponent field then reads 149 too high.
  const __mmask16 normal = _mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(0x800000));
  const __m512i bits = _mm512_mask_mov_epi32(_mm512_castps_si512(_mm512_cvtepi32_ps(amax)), normal, amax);
  const __m512i bias = _mm512_mask_mov_epi32(_mm512_set1_epi32(127 + 149 + rule.offset), normal,
                                             _mm512_set1_epi32(127 + rule.offset));
  __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(bits, 23), bias);
  if (rule.round_up) {
    const __mmask16 up = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFF)),
                                                 _mm512_set1_epi32(static_cast<int>(rule.max_fraction)));
    e = _mm512_mask_add_epi32(e, up, e, _mm512_set1_epi32(1));
  }
  e = _mm512_min_epi32(_mm512_max_epi32(e, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
  e = _mm512_mask_mov_epi32(e, zero, _mm512_set1_epi32(rule.zero));
  return _mm512_maskz_mov_epi32(static_cast<__mmask16>(~special), e);
}

// exp2_block of 16 exponents in [-127, 127].
MANTISSA_AVX512 inline __m512 exp2_block16(__m512i e) {
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127)), 23);
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(bits, _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(-126)),
                                                   _mm512_set1_epi32(0x00400000)));
}

// |x| bits of a block folded to one register: kVectors full vectors, or
// (kVectors 0) len elements with a masked tail.
template <size_t kVectors>
MANTISSA_AVX512 inline __m512i block_max(const float* b, size_t len) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  __m512i m = _mm512_setzero_si512();
  if constexpr (kVectors > 0) {
    for (size_t k = 0; k < kVectors; ++k) m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_loadu_si512(b + 16 * k), abs_mask));
  } else {
    for (size_t i = 0; i < len; i += 16)
      m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_maskz_loadu_epi32(detail::tail_mask16(len - i), b + i), abs_mask));
  }
  return m;
}

// The next (up to) 16 blocks of x (`left` elements from x on): exponents
// (stored), 2^-E in mult and 2^E in fold, from one max tree.
MANTISSA_AVX512 inline void block_factors16(const float* x, size_t left, size_t block, const BlockRule& rule,
                                            int8_t* exponents, float* mult, float* fold) {
  const size_t blocks = std::min<size_t>(16, (left + block - 1) / block);
  __m512i v[16];
  if (blocks == 16 && left >= 16 * block && (block == 32 || block == 128)) {  // the usual sizes, unrolled
    for (size_t j = 0; j < 16; ++j) v[j] = block == 32 ? block_max<2>(x + 32 * j, 32) : block_max<8>(x + 128 * j, 128);
  } else {
    for (size_t j = 0; j < 16; ++j)
      v[j] = j < blocks ? block_max<0>(x + j * block, std::min(block, left - j * block)) : _mm512_setzero_si512();
  }
  const __m512i e = block_exponents16(rule, detail::max_across16(v));
  _mm_mask_storeu_epi8(exponents, detail::tail_mask16(blocks), _mm512_cvtepi32_epi8(e));
  _mm512_store_ps(mult, exp2_block16(_mm512_sub_epi32(_mm512_setzero_si512(), e)));
  _mm512_store_ps(fold, exp2_block16(e));
}

// Where a pass takes its factors from: mult/fold arrays (one entry per
// element or per group), or with `rule` each group's own amax (run_blocks).
struct Factors {
  const float* mult = nullptr;
  const float* fold = nullptr;
  const BlockRule* rule = nullptr;
  int8_t* exponents = nullptr;
};

template <int kRoute, bool kDecode, bool kFold>
MANTISSA_AVX512 ScanTotals run_avx512(const CastState& s, const float* x, size_t n, size_t group, const Factors& fac,
                                      uint8_t* codes, uint16_t* decoded) {
  const detail::QuantPlan p = s.plan;  // a local copy: the stores cannot alias it
  Regs r;
  r.scan.m = _mm512_setzero_ps();
  r.limit = _mm512_set1_ps(s.limit);
  r.shift = _mm512_set1_ps(kRoute != kGeneric ? std::ldexp(1.0f, detail::small_route_shift(p)) : 1.0f);
  if constexpr (kDecode) r.table = detail::load_table(*s.table);
  FastState f;
  f.amax = _mm512_setzero_ps();
  if constexpr (kRoute == kFast) f.k = detail::fp8_regs(s.fast);
  const __m512 one = _mm512_set1_ps(1.0f);
  if (group == 1) {  // a multiplier per element
    for (size_t i = 0; i < n; i += 32) {
      const TailMask32 m = detail::tail_mask32(n - i);
      const __m512 mlo = _mm512_maskz_loadu_ps(m.lo, fac.mult + i), mhi = _mm512_maskz_loadu_ps(m.hi, fac.mult + i + 16);
      __m512 flo = one, fhi = one;
      if constexpr (kFold) {
        flo = _mm512_maskz_loadu_ps(m.lo, fac.fold + i);
        fhi = _mm512_maskz_loadu_ps(m.hi, fac.fold + i + 16);
      }
      step32<kRoute, kDecode, kFold>(p, r, f, x, i, m, mlo, mhi, flo, fhi, codes, decoded);
    }
  } else {
    // Steps over [i, end) with one multiplier and fold: whole steps unmasked
    // (a constant mask folds away), then the tail (no step straddles two groups).
    const auto group_steps = [&](size_t i, size_t end, __m512 mv, __m512 fv) MANTISSA_AVX512 __attribute__((always_inline)) {
      for (; i + 32 <= end; i += 32)
        step32<kRoute, kDecode, kFold>(p, r, f, x, i, TailMask32{0xFFFF, 0xFFFF}, mv, mv, fv, fv, codes, decoded);
      if (i < end)
        step32<kRoute, kDecode, kFold>(p, r, f, x, i, detail::tail_mask32(end - i), mv, mv, fv, fv, codes, decoded);
    };
    if (fac.rule) {  // blocks with their own factors, 16 at a time (read twice, the second time from L1)
      // kGroup: the block size as a constant (MX's 32) for the compiler to unroll, or 0 (use `group`).
      const auto blocks16 = [&](auto group_constant) MANTISSA_AVX512 {
        constexpr size_t kGroup = decltype(group_constant)::value;
        const size_t g = kGroup ? kGroup : group;
        alignas(64) float block_mult[16], block_fold[16];
        for (size_t g0 = 0; g0 < n; g0 += 16 * g) {
          const size_t left = n - g0;
          block_factors16(x + g0, left, g, *fac.rule, fac.exponents + g0 / g, block_mult, block_fold);
          for (size_t j = 0; j < 16 && g * j < left; ++j)
            group_steps(g0 + g * j, g0 + std::min(left, g * (j + 1)), _mm512_set1_ps(block_mult[j]),
                        kFold ? _mm512_set1_ps(block_fold[j]) : one);
        }
      };
      if (group == 32) blocks16(std::integral_constant<size_t, 32>{});
      else blocks16(std::integral_constant<size_t, 0>{});
    } else {  // one multiplier (and fold) per group from the arrays
      for (size_t g0 = 0, g = 0; g0 < n; g0 += group, ++g)
        group_steps(g0, std::min(n, g0 + group), _mm512_set1_ps(fac.mult[g]), kFold ? _mm512_set1_ps(fac.fold[g]) : one);
    }
  }
  return {_mm512_reduce_max_ps(_mm512_max_ps(r.scan.m, f.amax)), r.scan.bad != 0, r.scan.beyond + f.beyond};
}

using RunFn = ScanTotals (*)(const CastState&, const float*, size_t, size_t, const Factors&, uint8_t*, uint16_t*);

template <int kRoute>
RunFn pick_for(bool decode, bool fold) {
  if (!decode) return run_avx512<kRoute, false, false>;
  return fold ? run_avx512<kRoute, true, true> : run_avx512<kRoute, true, false>;
}

RunFn pick(CastRoute route, bool decode, bool fold) {
  switch (route) {
    case CastRoute::fast: return pick_for<kFast>(decode, fold);
    case CastRoute::small: return pick_for<kSmall>(decode, fold);
    default: return pick_for<kGeneric>(decode, fold);
  }
}

// The vector pass the active instruction set allows (the route was fixed at
// construction; a cap lowered since then is obeyed).
enum class Pass { scalar, avx2, avx512 };
Pass vector_path(const CastState& s) {
  if (s.route == CastRoute::scalar) return Pass::scalar;
  const cpu::Isa isa = cpu::active_isa();
  return isa >= cpu::Isa::avx512 ? Pass::avx512 : isa >= cpu::Isa::avx2 ? Pass::avx2 : Pass::scalar;
}

detail::Avx2Cast avx2_args(const CastState& s) {
  return {&s.plan, &s.fast, s.table, s.limit, s.route};
}

MANTISSA_AVX512 void column_amax_avx512(const float* x, size_t n, uint32_t* acc) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = detail::tail_mask16(n - i);
    const __m512i a = _mm512_and_si512(_mm512_maskz_loadu_epi32(m, x + i), abs_mask);
    _mm512_mask_storeu_epi32(acc + i, m, _mm512_max_epu32(a, _mm512_maskz_loadu_epi32(m, acc + i)));
  }
}

}  // namespace

ScaledCast::ScaledCast(const Format& f, bool saturate, const Table16& decode) : s_(std::make_unique<CastState>()) {
  if (f.storage_bytes() != 1)
    throw std::invalid_argument("ScaledCast: format '" + f.name + "' does not have 1-byte codes");
  CastState& s = *s_;
  s.format = f;
  RoundOptions opt;
  opt.saturate = saturate;
  s.plan = detail::make_plan(s.format, opt);
  s.fast = detail::make_fp8_rounder(s.plan);
  s.table = &decode;
  s.limit = static_cast<float>(f.max());
  if (cpu::active_isa() >= cpu::Isa::avx2 && s.plan.shape != detail::Shape::scalar_only)
    s.route = s.fast.usable ? CastRoute::fast : detail::small_route(s.plan) ? CastRoute::small : CastRoute::generic;
}

ScaledCast::~ScaledCast() = default;

ScanTotals ScaledCast::run(const float* x, size_t n, const float* mult, size_t group, uint8_t* codes,
                           uint16_t* decoded, const float* fold) const {
  if (group < 1) throw std::invalid_argument("ScaledCast::run: group must be >= 1");
  if (!codes && !decoded) throw std::invalid_argument("ScaledCast::run: neither codes nor decode wanted");
  const Pass pass = vector_path(*s_);
  if (pass == Pass::scalar) return run_scalar(*s_, x, n, mult, group, codes, decoded, fold);
  if (pass == Pass::avx2) return detail::cast_avx2(avx2_args(*s_), x, n, mult, group, codes, decoded, fold);
  const bool dec = decoded != nullptr;
  return pick(s_->route, dec, dec && fold != nullptr)(*s_, x, n, group, Factors{mult, fold, nullptr, nullptr}, codes,
                                                      decoded);
}

ScanTotals ScaledCast::run_blocks(const float* x, size_t n, size_t block, const BlockRule& rule, int8_t* exponents,
                                  uint8_t* codes, uint16_t* decoded) const {
  if (block < 2) throw std::invalid_argument("ScaledCast::run_blocks: block must be >= 2");
  if (!codes && !decoded) throw std::invalid_argument("ScaledCast::run_blocks: neither codes nor decode wanted");
  const Pass pass = vector_path(*s_);
  if (pass == Pass::avx2)
    return detail::cast_blocks_avx2(avx2_args(*s_), x, n, block, rule, exponents, codes, decoded);
  if (pass == Pass::avx512) {
    const bool dec = decoded != nullptr;
    return pick(s_->route, dec, dec)(*s_, x, n, block, Factors{nullptr, nullptr, &rule, exponents}, codes, decoded);
  }
  ScanTotals t;
  for (size_t b0 = 0, b = 0; b0 < n; b0 += block, ++b) {
    const size_t len = std::min(block, n - b0);
    uint32_t amax = 0;
    for (size_t i = b0; i < b0 + len; ++i) amax = std::max(amax, abs_bits(x[i]));
    const int e = rule.exponent(amax);
    exponents[b] = static_cast<int8_t>(e);
    const float mult = exp2_block(-e), fold = exp2_block(e);
    t = add(t, run_scalar(*s_, x + b0, len, &mult, len, codes ? codes + b0 : nullptr, decoded ? decoded + b0 : nullptr,
                          &fold));
  }
  return t;
}

void column_amax_bits(const float* x, size_t n, uint32_t* acc) {
  if (cpu::active_isa() >= cpu::Isa::avx512) return column_amax_avx512(x, n, acc);
  if (cpu::active_isa() >= cpu::Isa::avx2) return detail::column_amax_avx2(x, n, acc);
  for (size_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], abs_bits(x[i]));
}

}  // namespace mantissa::formats
