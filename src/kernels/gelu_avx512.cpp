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
// The exact (erf) GELU's kernels follow, the same operations as the scalar
// reference of gelu_erf.hpp on 16 lanes (the same bits: 2^n is built in the
// exponent bits there too, not by vscalefps, which would round once less).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/gelu_erf.hpp"
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

// The exact GELU's shared terms (gelu_erf.hpp), operation for operation as gelu_erf_parts.
struct ErfParts16 {
  __m512 a, th, p, s1, s2;
};
MANTISSA_GELU_AVX512 MANTISSA_NO_CONTRACT inline ErfParts16 erf_parts16(__m512 x) {
  ErfParts16 g;
  const __m512 ax = _mm512_abs_ps(x);
  g.a = _mm512_min_ps(_mm512_set1_ps(kErfClamp), ax);  // NaN stays NaN (second operand)
  const __m512 t = _mm512_div_ps(_mm512_set1_ps(kErfT), _mm512_add_ps(_mm512_set1_ps(kErfT), g.a));
  const __m512 s = _mm512_sub_ps(t, _mm512_set1_ps(kErfMid));
  __m512 h = _mm512_set1_ps(kErfH[10]);
  for (int k = 9; k >= 0; --k) h = _mm512_fmadd_ps(h, s, _mm512_set1_ps(kErfH[k]));
  g.th = _mm512_mul_ps(t, h);
  const __m512 sq = _mm512_mul_ps(g.a, g.a);
  const __m512 sq_lo = _mm512_fmsub_ps(g.a, g.a, sq);
  const __m512 y = _mm512_mul_ps(_mm512_set1_ps(-0.5f), sq);
  const __m512 round = _mm512_set1_ps(kErfRound);
  const __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(y, _mm512_set1_ps(kExpLog2e)), round), round);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Hi), y);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpTaylor[0]);
  for (int k = 1; k < 9; ++k) p = _mm512_fmadd_ps(r, p, _mm512_set1_ps(kExpTaylor[k]));
  g.p = _mm512_fmadd_ps(p, _mm512_mul_ps(_mm512_set1_ps(-0.5f), sq_lo), p);
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  g.s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  g.s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  return g;
}

MANTISSA_GELU_AVX512 MANTISSA_NO_CONTRACT inline __m512 poly5_16(const float (&c)[6], __m512 u) {
  __m512 r = _mm512_set1_ps(c[5]);
  for (int k = 4; k >= 0; --k) r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(c[k]));
  return r;
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

MANTISSA_GELU_AVX512 MANTISSA_NO_CONTRACT void gelu_erf_forward_avx512(float* out, const float* x, int64_t n, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    const ErfParts16 g = erf_parts16(v);
    const __m512 m = _mm512_mul_ps(g.p, g.th);
    const __m512 neg_a = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g.a), _mm512_set1_epi32(INT32_MIN)));
    const __m512 neg = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(neg_a, m), g.s1), g.s2);
    const __m512 q = _mm512_mul_ps(_mm512_mul_ps(m, g.s1), g.s2);
    const __m512 pos = _mm512_mul_ps(v, _mm512_sub_ps(_mm512_set1_ps(1.0f), q));
    const __mmask16 lt = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 small = _mm512_mul_ps(v, _mm512_fmadd_ps(v, poly5_16(kErfP, _mm512_mul_ps(v, v)), _mm512_set1_ps(0.5f)));
    const __mmask16 near0 = _mm512_cmp_ps_mask(g.a, _mm512_set1_ps(kErfSmall), _CMP_LT_OQ);
    const __m512 y = _mm512_mask_blend_ps(near0, _mm512_mask_blend_ps(lt, pos, neg), small);
    _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(sc, y));
  }
}

MANTISSA_GELU_AVX512 MANTISSA_NO_CONTRACT void gelu_erf_backward_avx512(float* dx, const float* x, const float* dout, int64_t n,
                                                   bool accumulate, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    const ErfParts16 g = erf_parts16(v);
    const __m512 f = _mm512_fnmadd_ps(g.a, _mm512_set1_ps(kInvSqrt2Pi), g.th);
    const __m512 w = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(g.p, f), g.s1), g.s2);
    const __mmask16 lt = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 small = _mm512_fmadd_ps(v, poly5_16(kErfR, _mm512_mul_ps(v, v)), _mm512_set1_ps(0.5f));
    const __mmask16 near0 = _mm512_cmp_ps_mask(g.a, _mm512_set1_ps(kErfSmall), _CMP_LT_OQ);
    const __m512 slope =
        _mm512_mask_blend_ps(near0, _mm512_mask_blend_ps(lt, _mm512_sub_ps(_mm512_set1_ps(1.0f), w), w), small);
    const __m512 grad = _mm512_mul_ps(slope, _mm512_mul_ps(sc, _mm512_maskz_loadu_ps(k, dout + i)));
    const __m512 base = accumulate ? _mm512_maskz_loadu_ps(k, dx + i) : _mm512_setzero_ps();  // 0 + : -0 -> +0
    _mm512_mask_storeu_ps(dx + i, k, _mm512_add_ps(base, grad));
  }
}

}  // namespace mantissa::kernels
