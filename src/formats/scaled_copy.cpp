// The scaled copy and scan of formats/scaled_copy.hpp.
#include "mantissa/formats/scaled_copy.hpp"
#include "mantissa/cpu/isa.hpp"

#include <bit>
#include <cmath>
#include <limits>

#include "formats/convert_avx2.hpp"
#include "formats/convert_avx512_scan.hpp"
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

MANTISSA_AVX512 ScanTotals scaled_copy_avx512(const float* x, float* out, size_t n, float mult, float limit) {
  const __m512 vmult = _mm512_set1_ps(mult), vlimit = _mm512_set1_ps(limit);
  detail::Lanes16 st{_mm512_setzero_ps()};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 s = detail::scan16(st, _mm512_loadu_ps(x + i), 0xFFFF, vmult, vlimit);
    if (out) _mm512_storeu_ps(out + i, s);
  }
  if (i < n) {
    const auto lanes = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 s = detail::scan16(st, _mm512_maskz_loadu_ps(lanes, x + i), lanes, vmult, vlimit);
    if (out) _mm512_mask_storeu_ps(out + i, lanes, s);
  }
  return {_mm512_reduce_max_ps(st.m), st.bad != 0, st.beyond};
}

}  // namespace

// Ordered, best first (cpu::select).
using ScaledCopyFn = ScanTotals (*)(const float*, float*, size_t, float, float);
const cpu::Impl<ScaledCopyFn> kScaledCopy[] = {
    {"avx512:scaled_copy", cpu::Isa::avx512, scaled_copy_avx512},
    {"avx2:scaled_copy", cpu::Isa::avx2, detail::scaled_copy_avx2},
    {"scalar:scaled_copy", cpu::Isa::scalar, scaled_copy_scalar},
};

ScanTotals scaled_copy(const float* x, float* out, size_t n, float mult, float limit) {
  return cpu::select(kScaledCopy).fn(x, out, n, mult, limit);
}

const char* scaled_copy_implementation() { return cpu::select(kScaledCopy).name; }

}  // namespace mantissa::formats
