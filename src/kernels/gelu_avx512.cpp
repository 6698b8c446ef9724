// GELU (tanh form) forward and backward on AVX-512 registers: the same
// formulas as the generic spans of row_math.cpp, with the two costs the
// compiler cannot remove there taken out. 1 / (1 + e) is a reciprocal
// estimate plus one Newton step (~2^-28 relative) instead of a division, and
// exp builds 2^n with vscalefps instead of clamps and an integer conversion.
// 2u is clamped to [-80, 80], where e^-2u and 1 + e^-2u stay finite and
// normal, so no select is needed for the far-left tail (its terms are then
// below 1e-28 instead of exactly 0) and a NaN input still propagates
// through the factor x.
// GCC 12's AVX-512 intrinsics initialise their undefined-vector placeholder
// from itself, which -W(maybe-)uninitialized reports after inlining.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/row_math.hpp"
#include "kernels/vec_math.hpp"

#define MANTISSA_GELU_AVX512 __attribute__((target("avx512f")))

namespace mantissa::kernels {
namespace {

// e^x for x in [-80, 80]: vexp's reduction and degree-8 polynomial.
MANTISSA_GELU_AVX512 inline __m512 exp16(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kExpLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpTaylor[0]);
  for (int k = 1; k < 9; ++k) p = _mm512_fmadd_ps(r, p, _mm512_set1_ps(kExpTaylor[k]));
  return _mm512_scalef_ps(p, n);
}

// s = sigmoid(2u) and e = e^-2u of 16 inputs.
struct Sigmoid16 {
  __m512 s, e;
};
MANTISSA_GELU_AVX512 inline Sigmoid16 sigmoid2u(__m512 v) {
  const __m512 w = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(kGeluCubic), _mm512_mul_ps(v, v)), v, v);
  __m512 m2u = _mm512_mul_ps(_mm512_set1_ps(-2.0f * kGeluScale), w);
  m2u = _mm512_min_ps(_mm512_max_ps(m2u, _mm512_set1_ps(-80.0f)), _mm512_set1_ps(80.0f));
  const __m512 e = exp16(m2u);
  const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), e);
  const __m512 r = _mm512_rcp14_ps(d);
  const __m512 s = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r);
  return {s, e};
}

}  // namespace

MANTISSA_GELU_AVX512 void gelu_forward_avx512(float* out, const float* x, int64_t n, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(sc, _mm512_mul_ps(v, sigmoid2u(v).s)));
  }
}

// slope = s + 2 x s (e s) du/dx, du/dx = sqrt(2/pi) (1 + 3 c x^2).
MANTISSA_GELU_AVX512 void gelu_backward_avx512(float* dx, const float* x, const float* dout, int64_t n,
                                               bool accumulate, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const Sigmoid16 g = sigmoid2u(v);
    const __m512 du = _mm512_mul_ps(_mm512_set1_ps(kGeluScale),
                                    _mm512_fmadd_ps(_mm512_set1_ps(3.0f * kGeluCubic), _mm512_mul_ps(v, v), _mm512_set1_ps(1.0f)));
    const __m512 tail = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(v, v), g.s), _mm512_mul_ps(g.e, g.s)), du);
    const __m512 slope = _mm512_add_ps(g.s, tail);
    const __m512 grad = _mm512_mul_ps(slope, _mm512_mul_ps(sc, _mm512_maskz_loadu_ps(m, dout + i)));
    // 0 + : a -0 product gives +0, as += into zeros
    const __m512 base = accumulate ? _mm512_maskz_loadu_ps(m, dx + i) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(dx + i, m, _mm512_add_ps(base, grad));
  }
}

}  // namespace mantissa::kernels
