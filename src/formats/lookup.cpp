// Byte -> 16-bit table lookup (formats/lookup.hpp).
//
// Sign-magnitude tables (every FP8, FP6 and FP4 format decoded to bf16) take
// a shorter route than an arbitrary table: see SignMagnitude
// (lookup_internal.hpp). The AVX2 path is in lookup_avx2.cpp.
#include "mantissa/formats/lookup.hpp"
#include "mantissa/cpu/isa.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>

#include "formats/convert_avx512_lookup.hpp"
#include "formats/lookup_internal.hpp"
#include "mantissa/formats/convert.hpp"

namespace mantissa::formats {
namespace detail {

namespace {

SignMagnitude analyse(const Table16& t) {
  SignMagnitude r;
  bool signed_nan = false, unsigned_nan = false;
  for (uint32_t a = 0; a < 128; ++a) {
    const uint32_t e = (t[a] >> 7) & 0xFF;
    if ((t[a] & 0x8000) != 0 || (e == 0 && (t[a] & 0x7F) != 0)) return {};  // negative or subnormal magnitude
    const bool nan = (t[a] & 0x7FFF) > 0x7F80;
    if (a != 0 && t[0x80 | a] != (t[a] | 0x8000)) {
      if (!nan || t[0x80 | a] != t[a]) return {};
      unsigned_nan = true;
    } else if (nan) {
      signed_nan = true;
    }
    if (e != 0 && e != 0xFF) {
      r.emin = std::min(r.emin, static_cast<int>(e));
      r.emax = std::max(r.emax, static_cast<int>(e));
    }
  }
  if (signed_nan && unsigned_nan) return {};
  r.unsigned_nan = unsigned_nan;
  r.neg_zero_special = t[0x80] != (t[0] | 0x8000);
  r.ok = true;
  return r;
}

}  // namespace

const SignMagnitude& analysis_of(const Table16& table) {
  thread_local Table16 seen{};
  thread_local SignMagnitude rule = analyse(seen);
  if (std::memcmp(seen.data(), table.data(), sizeof(Table16)) != 0) {
    seen = table;
    rule = analyse(seen);
  }
  return rule;
}

std::optional<int> exponent_fold(const SignMagnitude& r, float fold) {
  const uint32_t bits = std::bit_cast<uint32_t>(fold);
  const int k = static_cast<int>(bits >> 23) - 127;
  if ((bits & 0x807FFFFF) != 0 || k == 128 || k == -127 || r.emin + k < 1 || r.emax + k > 254) return std::nullopt;
  return k;
}

}  // namespace detail

namespace {

float bf16_value(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t fold_scalar(uint16_t bits, float fold) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(bf16_value(bits) * fold) >> 16);
}

template <class Out>
void store_scalar(Out* out, uint16_t bits) {
  if constexpr (sizeof(Out) == 2)
    *out = bits;
  else
    *out = bf16_value(bits);
}

template <class Out>
void lookup_scalar(const Table16& table, const uint8_t* codes, Out* out, size_t n, const float* fold, size_t group) {
  for (size_t i = 0; i < n; ++i)
    store_scalar(out + i, fold ? fold_scalar(table[codes[i]], fold[i / group]) : table[codes[i]]);
}

using detail::analysis_of;
using detail::exponent_fold;
using detail::SignMagnitude;

struct MagnitudeRegs {
  __m512i t[4];  // the 128 magnitude entries
  bool neg_zero_special, unsigned_nan;
};

// 32 codes (16-bit lanes) -> bf16 bits, the exponent fields of finite
// nonzero values raised by k (k << 7 in each lane).
MANTISSA_AVX512 inline __m512i magnitude32(const MagnitudeRegs& r, __m512i x, __m512i k7) {
  const __m512i q0 = _mm512_permutex2var_epi16(r.t[0], x, r.t[1]);
  const __m512i q1 = _mm512_permutex2var_epi16(r.t[2], x, r.t[3]);
  __m512i v = _mm512_mask_mov_epi16(q0, _mm512_test_epi16_mask(x, _mm512_set1_epi16(0x40)), q1);
  // exponent field in [1, 254]: (e - 0x80) < 0x7E80 unsigned, e = v & 0x7F80.
  const __m512i e = _mm512_and_si512(v, _mm512_set1_epi16(0x7F80));
  const __mmask32 normal = _mm512_cmplt_epu16_mask(_mm512_sub_epi16(e, _mm512_set1_epi16(0x80)), _mm512_set1_epi16(0x7E80));
  v = _mm512_mask_add_epi16(v, normal, v, k7);
  // | (x & 0x80) << 8, except on NaN lanes of a table whose NaNs are unsigned
  const __m512i s = _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(x, 8), _mm512_set1_epi16(static_cast<short>(0x8000)), 0xF8);
  if (!r.unsigned_nan) return s;
  const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, _mm512_set1_epi16(0x7FFF)), _mm512_set1_epi16(0x7F80));
  return _mm512_mask_mov_epi16(s, nan, v);
}

template <class Out>
MANTISSA_AVX512 inline void store32(Out* out, size_t i, detail::TailMask32 m, __m512i d) {
  if constexpr (sizeof(Out) == 2) {
    _mm512_mask_storeu_epi16(out + i, m.both(), d);
  } else {
    const __m512i lo = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(d)), 16);
    const __m512i hi = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(d, 1)), 16);
    _mm512_mask_storeu_ps(out + i, m.lo, _mm512_castsi512_ps(lo));
    _mm512_mask_storeu_ps(out + i + 16, m.hi, _mm512_castsi512_ps(hi));
  }
}

// The full-table route for 32 codes x (16-bit lanes), folded by flo/fhi (kFold).
template <bool kFold>
MANTISSA_AVX512 inline __m512i table32(const detail::Table16Regs& t, __m512i x, __m512 flo, __m512 fhi) {
  const __m512i d = detail::lookup32(t, x);
  if constexpr (kFold) return detail::fold32(d, flo, fhi);
  return d;
}

MANTISSA_AVX512 inline __m512i load_codes32(const uint8_t* codes, size_t i, detail::TailMask32 m) {
  return _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m.both(), codes + i));
}

// Codes [i, i + 32) in m: the magnitude route with exponent step k7 (k << 7
// per lane), or the full table with fold flo/fhi (kFold) when code 0x80 is
// among them and breaks the rule.
template <bool kFold, class Out>
MANTISSA_AVX512 inline void step32(const MagnitudeRegs& r, const detail::Table16Regs& t, const uint8_t* codes, Out* out,
                                   size_t i, detail::TailMask32 m, __m512i k7, __m512 flo, __m512 fhi) {
  const __m512i x = load_codes32(codes, i, m);
  if (r.neg_zero_special && _mm512_cmpeq_epi16_mask(x, _mm512_set1_epi16(0x80)) != 0) [[unlikely]]
    return store32(out, i, m, table32<kFold>(t, x, flo, fhi));
  store32(out, i, m, magnitude32(r, x, k7));
}

// The table route: codes [i, i + 32) in m, folded by flo/fhi (kFold).
template <bool kFold, class Out>
MANTISSA_AVX512 inline void table_step32(const detail::Table16Regs& t, const uint8_t* codes, Out* out, size_t i,
                                         detail::TailMask32 m, __m512 flo, __m512 fhi) {
  store32(out, i, m, table32<kFold>(t, load_codes32(codes, i, m), flo, fhi));
}

// Runs step(i, mask, flo, fhi) over [0, n) in 32-element steps with the
// fold factors of each (none, one per element, or one per group).
template <class Step>
MANTISSA_AVX512 [[gnu::always_inline]] inline void over_steps(size_t n, const float* fold, size_t group, Step step) {
  if (!fold) {
    const __m512 none = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 32) step(i, detail::tail_mask32(n - i), none, none);
  } else if (group == 1) {
    for (size_t i = 0; i < n; i += 32) {
      const detail::TailMask32 m = detail::tail_mask32(n - i);
      step(i, m, _mm512_maskz_loadu_ps(m.lo, fold + i), _mm512_maskz_loadu_ps(m.hi, fold + i + 16));
    }
  } else {  // one multiplier per group: no step straddles two groups
    for (size_t g0 = 0, g = 0; g0 < n; g0 += group, ++g) {
      const __m512 f = _mm512_set1_ps(fold[g]);
      const size_t end = std::min(n, g0 + group);
      for (size_t i = g0; i < end; i += 32) step(i, detail::tail_mask32(end - i), f, f);
    }
  }
}

template <class Out>
MANTISSA_AVX512 void lookup_avx512(const Table16& table, const uint8_t* codes, Out* out, size_t n, const float* fold,
                                   size_t group) {
  const detail::Table16Regs t = detail::load_table(table);
  const SignMagnitude& a = analysis_of(table);
  // Folds as exponent steps: none, or one per group (each checked).
  if (a.ok && (!fold || group > 1)) {
    const MagnitudeRegs r{{t.t[0], t.t[1], t.t[2], t.t[3]}, a.neg_zero_special, a.unsigned_nan};
    for (size_t g0 = 0, g = 0; g0 < n; g0 += fold ? group : n, ++g) {
      const size_t end = fold ? std::min(n, g0 + group) : n;
      const float f = fold ? fold[g] : 1.0f;
      const std::optional<int> k = fold ? exponent_fold(a, f) : std::optional<int>(0);
      const __m512 fv = _mm512_set1_ps(f);
      if (k) {
        const __m512i k7 = _mm512_set1_epi16(static_cast<short>(*k * 128));
        size_t i = g0;
        for (; i + 32 <= end; i += 32)  // whole steps unmasked (a constant mask folds away)
          step32<true>(r, t, codes, out, i, detail::TailMask32{0xFFFF, 0xFFFF}, k7, fv, fv);
        if (i < end) step32<true>(r, t, codes, out, i, detail::tail_mask32(end - i), k7, fv, fv);
      } else {
        for (size_t i = g0; i < end; i += 32) table_step32<true>(t, codes, out, i, detail::tail_mask32(end - i), fv, fv);
      }
    }
    return;
  }
  if (fold)
    over_steps(n, fold, group, [&](size_t i, detail::TailMask32 m, __m512 flo, __m512 fhi) MANTISSA_AVX512 {
      table_step32<true>(t, codes, out, i, m, flo, fhi);
    });
  else
    over_steps(n, fold, group, [&](size_t i, detail::TailMask32 m, __m512 flo, __m512 fhi) MANTISSA_AVX512 {
      table_step32<false>(t, codes, out, i, m, flo, fhi);
    });
}

template <class Out>
using LookupFn = void (*)(const Table16&, const uint8_t*, Out*, size_t, const float*, size_t);

// Ordered, best first (cpu::select).
template <class Out>
const cpu::Impl<LookupFn<Out>> kLookup[] = {
    {"avx512:lookup", cpu::Isa::avx512, lookup_avx512<Out>},
    {"avx2:lookup", cpu::Isa::avx2, detail::lookup_avx2<Out>},
    {"scalar:lookup", cpu::Isa::scalar, lookup_scalar<Out>},
};

template <class Out>
void lookup_any(const Table16& table, const uint8_t* codes, Out* out, size_t n, const float* fold, size_t group) {
  cpu::select(kLookup<Out>).fn(table, codes, out, n, fold, group);
}

}  // namespace

const char* lookup_implementation() { return cpu::select(kLookup<uint16_t>).name; }

void lookup16(const Table16& table, const uint8_t* codes, uint16_t* out, size_t n, const float* fold, size_t group) {
  lookup_any(table, codes, out, n, fold, group);
}

void lookup16_widen(const Table16& table, const uint8_t* codes, float* out, size_t n, const float* fold, size_t group) {
  lookup_any(table, codes, out, n, fold, group);
}

}  // namespace mantissa::formats
