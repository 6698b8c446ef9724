// The byte -> 16-bit table lookup on AVX2 (formats/lookup.hpp), the bits of
// lookup_scalar: 32 codes a step through vpshufb byte planes
// (lookup_avx2.hpp). Sign-magnitude tables look up the 128 magnitudes (8
// groups instead of 16) and apply a power-of-two fold as an add to the
// exponent field, as the AVX-512 path does; every other table and fold goes
// through the full table and an fp32 multiply. Tails go through a 32-element
// buffer (AVX2 has no byte-masked loads and stores).
#include "formats/lookup_avx2.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include "formats/lookup_internal.hpp"

namespace mantissa::formats::detail {
namespace {

using avx2::Entries;
using avx2::TablePlanes;

// Codes [0, count) of a step (count <= 32 used; zeros beyond).
MANTISSA_AVX2 inline __m256i load_codes(const uint8_t* codes, size_t count) {
  if (count >= 32) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
  alignas(32) uint8_t buf[32] = {};
  std::memcpy(buf, codes, count);
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
}

// Per-element folds [0, count) of a step as four vectors (ones beyond).
struct Folds {
  __m256 f[4];
};
MANTISSA_AVX2 inline Folds load_folds(const float* fold, size_t count) {
  Folds r;
  if (count >= 32) {
    for (int q = 0; q < 4; ++q) r.f[q] = _mm256_loadu_ps(fold + 8 * q);
    return r;
  }
  alignas(32) float buf[32];
  std::fill(buf, buf + 32, 1.0f);
  std::memcpy(buf, fold, count * sizeof(float));
  for (int q = 0; q < 4; ++q) r.f[q] = _mm256_load_ps(buf + 8 * q);
  return r;
}
MANTISSA_AVX2 inline Folds broadcast_fold(float f) {
  const __m256 v = _mm256_set1_ps(f);
  return {{v, v, v, v}};
}

// Entries of 32 elements to out[0, count).
template <class Out>
MANTISSA_AVX2 inline void store32(Out* out, size_t count, Entries e) {
  alignas(32) Out buf[32];
  Out* dst = count >= 32 ? out : buf;
  if constexpr (sizeof(Out) == 2) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), e.first);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16), e.second);
  } else {
    _mm256_storeu_ps(dst, avx2::widen8(_mm256_castsi256_si128(e.first)));
    _mm256_storeu_ps(dst + 8, avx2::widen8(_mm256_extracti128_si256(e.first, 1)));
    _mm256_storeu_ps(dst + 16, avx2::widen8(_mm256_castsi256_si128(e.second)));
    _mm256_storeu_ps(dst + 24, avx2::widen8(_mm256_extracti128_si256(e.second, 1)));
  }
  if (count < 32) std::memcpy(out, buf, count * sizeof(Out));
}

// The full-table route: entries of 32 codes, times the folds (kFold).
template <bool kFold>
MANTISSA_AVX2 inline Entries table32(const TablePlanes& t, __m256i x, const Folds& f) {
  Entries e = avx2::lookup32(t, x);
  if constexpr (kFold) {
    e.first = avx2::fold16(e.first, f.f[0], f.f[1]);
    e.second = avx2::fold16(e.second, f.f[2], f.f[3]);
  }
  return e;
}

// One half of the magnitude route: magnitudes v (16-bit lanes), their codes
// in the high bytes of s. Exponent fields of finite nonzero values raised
// by k7 (k << 7; kShift), then the code's sign, except on NaN lanes of a
// table whose NaNs are unsigned.
template <bool kShift, bool kUnsignedNan>
MANTISSA_AVX2 inline __m256i finish16(__m256i v, __m256i s, __m256i k7) {
  if constexpr (kShift) {
    const __m256i e = _mm256_and_si256(v, _mm256_set1_epi16(0x7F80));  // exponent field in [1, 254]
    const __m256i normal = _mm256_and_si256(_mm256_cmpgt_epi16(e, _mm256_set1_epi16(0x7F)),
                                            _mm256_cmpgt_epi16(_mm256_set1_epi16(0x7F80), e));
    v = _mm256_add_epi16(v, _mm256_and_si256(normal, k7));
  }
  const __m256i r =
      _mm256_or_si256(v, _mm256_and_si256(s, _mm256_set1_epi16(static_cast<short>(0x8000))));
  if constexpr (!kUnsignedNan) return r;
  const __m256i nan =
      _mm256_cmpgt_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x7FFF)), _mm256_set1_epi16(0x7F80));
  return _mm256_blendv_epi8(r, v, nan);
}

template <bool kShift, bool kUnsignedNan>
MANTISSA_AVX2 inline Entries magnitude32(const TablePlanes& t, __m256i x, __m256i k7) {
  const __m256i xo = avx2::order_codes(x);
  Entries e =
      avx2::interleave(avx2::lookup_planes<8>(t, _mm256_and_si256(xo, _mm256_set1_epi8(0x7F))));
  const __m256i zero = _mm256_setzero_si256();
  e.first = finish16<kShift, kUnsignedNan>(e.first, _mm256_unpacklo_epi8(zero, xo), k7);
  e.second = finish16<kShift, kUnsignedNan>(e.second, _mm256_unpackhi_epi8(zero, xo), k7);
  return e;
}

// Codes [0, n) of one group by the magnitude route with exponent step k,
// or by the full table (times f when kFold) for steps holding code 0x80 in a
// table where it breaks the rule.
template <bool kFold, bool kShift, bool kUnsignedNan, class Out>
MANTISSA_AVX2 void magnitude_run(const SignMagnitude& a, const TablePlanes& t, const uint8_t* codes,
                                 Out* out, size_t n, int k, float f) {
  const __m256i k7 = _mm256_set1_epi16(static_cast<short>(k * 128));
  const Folds fv = broadcast_fold(f);
  for (size_t i = 0; i < n; i += 32) {
    const size_t count = std::min<size_t>(32, n - i);
    const __m256i x = load_codes(codes + i, count);
    if (a.neg_zero_special &&
        _mm256_movemask_epi8(_mm256_cmpeq_epi8(x, _mm256_set1_epi8(static_cast<char>(0x80)))) != 0)
        [[unlikely]] {
      store32(out + i, count, table32<kFold>(t, x, fv));
      continue;
    }
    store32(out + i, count, magnitude32<kShift, kUnsignedNan>(t, x, k7));
  }
}

template <bool kFold, class Out>
MANTISSA_AVX2 void magnitude_any(const SignMagnitude& a, const TablePlanes& t, const uint8_t* codes,
                                 Out* out, size_t n, int k, float f) {
  if (k != 0)
    (a.unsigned_nan ? magnitude_run<kFold, true, true, Out>
                    : magnitude_run<kFold, true, false, Out>)(a, t, codes, out, n, k, f);
  else
    (a.unsigned_nan ? magnitude_run<kFold, false, true, Out>
                    : magnitude_run<kFold, false, false, Out>)(a, t, codes, out, n, k, f);
}

// Codes [0, n) by the full table, folded by fold[i / group] (kFold).
template <bool kFold, class Out>
MANTISSA_AVX2 void table_run(const TablePlanes& t, const uint8_t* codes, Out* out, size_t n,
                             const float* fold, size_t group) {
  if (!kFold || group == 1) {
    for (size_t i = 0; i < n; i += 32) {
      const size_t count = std::min<size_t>(32, n - i);
      const Folds f = kFold ? load_folds(fold + i, count) : broadcast_fold(1.0f);
      store32(out + i, count, table32<kFold>(t, load_codes(codes + i, count), f));
    }
    return;
  }
  for (size_t g0 = 0, g = 0; g0 < n;
       g0 += group, ++g) {  // one multiplier per group: no step straddles two
    const Folds f = broadcast_fold(fold[g]);
    const size_t end = std::min(n, g0 + group);
    for (size_t i = g0; i < end; i += 32) {
      const size_t count = std::min<size_t>(32, end - i);
      store32(out + i, count, table32<true>(t, load_codes(codes + i, count), f));
    }
  }
}

template <class Out>
MANTISSA_AVX2 void lookup_impl(const Table16& table, const uint8_t* codes, Out* out, size_t n,
                               const float* fold, size_t group) {
  const TablePlanes t = avx2::load_planes(table);
  const SignMagnitude& a = analysis_of(table);
  if (a.ok && !fold) return magnitude_any<false>(a, t, codes, out, n, 0, 1.0f);
  if (a.ok && group > 1) {  // folds as exponent steps, one per group (each checked)
    for (size_t g0 = 0, g = 0; g0 < n; g0 += group, ++g) {
      const size_t end = std::min(n, g0 + group);
      if (const std::optional<int> k = exponent_fold(a, fold[g]))
        magnitude_any<true>(a, t, codes + g0, out + g0, end - g0, *k, fold[g]);
      else
        table_run<true>(t, codes + g0, out + g0, end - g0, fold + g, end - g0);
    }
    return;
  }
  if (fold)
    table_run<true>(t, codes, out, n, fold, group);
  else
    table_run<false>(t, codes, out, n, fold, group);
}

}  // namespace

// Without the target attribute: a declaration and a definition that differ
// in it would be two versions of the function to GCC.
template <class Out>
void lookup_avx2(const Table16& table, const uint8_t* codes, Out* out, size_t n, const float* fold,
                 size_t group) {
  lookup_impl(table, codes, out, n, fold, group);
}

template void lookup_avx2<uint16_t>(const Table16&, const uint8_t*, uint16_t*, size_t, const float*,
                                    size_t);
template void lookup_avx2<float>(const Table16&, const uint8_t*, float*, size_t, const float*,
                                 size_t);

}  // namespace mantissa::formats::detail
