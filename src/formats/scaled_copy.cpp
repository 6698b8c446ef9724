// The scaled copy and scan of formats/scaled_copy.hpp.
#include "mantissa/formats/scaled_copy.hpp"

#include <bit>
#include <cmath>
#include <limits>

#include "formats/convert_avx512_util.hpp"
#include "mantissa/formats/convert.hpp"

namespace mantissa::formats {
namespace {

ScanTotals scaled_copy_scalar(const float* x, float* out, size_t n, float mult, float limit) {
  ScanTotals t;
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    const float v = x[i] * mult;
    if (out) out[i] = v;
    t.amax = a > t.amax ? a : t.amax;
    const bool finite = a <= std::numeric_limits<float>::max();
    t.nonfinite = t.nonfinite || !finite;
    t.beyond += finite && std::fabs(v) > limit;
  }
  return t;
}

// Running state of the 16-lane scan.
struct Lanes16 {
  __m512 m;
  __mmask16 bad = 0;
  int64_t beyond = 0;
};

// vmaxps(a, m) returns m when a is NaN, as the scalar a > m ? a : m does, so
// NaNs never enter the running max.
MANTISSA_AVX512 inline void scan16(Lanes16& st, __m512 v, __mmask16 lanes, float* out, __m512 vmult,
                                   __m512 vlimit) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), abs_mask));
  const __m512 s = _mm512_mul_ps(v, vmult);
  if (out) _mm512_mask_storeu_ps(out, lanes, s);
  st.m = _mm512_max_ps(a, st.m);
  const __mmask16 finite =
      _mm512_cmp_ps_mask(a, _mm512_set1_ps(std::numeric_limits<float>::max()), _CMP_LE_OQ) & lanes;
  st.bad = static_cast<__mmask16>(st.bad | (lanes & ~finite));
  const __m512 as = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(s), abs_mask));
  st.beyond += std::popcount(static_cast<unsigned>(_mm512_mask_cmp_ps_mask(finite, as, vlimit, _CMP_GT_OQ)));
}

MANTISSA_AVX512 ScanTotals scaled_copy_avx512(const float* x, float* out, size_t n, float mult, float limit) {
  const __m512 vmult = _mm512_set1_ps(mult), vlimit = _mm512_set1_ps(limit);
  Lanes16 st{_mm512_setzero_ps()};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) scan16(st, _mm512_loadu_ps(x + i), 0xFFFF, out ? out + i : nullptr, vmult, vlimit);
  if (i < n) {
    const auto lanes = static_cast<__mmask16>((1u << (n - i)) - 1);
    scan16(st, _mm512_maskz_loadu_ps(lanes, x + i), lanes, out ? out + i : nullptr, vmult, vlimit);
  }
  return {_mm512_reduce_max_ps(st.m), st.bad != 0, st.beyond};
}

}  // namespace

ScanTotals scaled_copy(const float* x, float* out, size_t n, float mult, float limit) {
  if (active_isa() >= Isa::avx512) return scaled_copy_avx512(x, out, n, mult, limit);
  return scaled_copy_scalar(x, out, n, mult, limit);
}

}  // namespace mantissa::formats
