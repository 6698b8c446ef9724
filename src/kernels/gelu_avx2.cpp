// GELU (tanh form) forward and backward on AVX2 + FMA registers: the AVX-512
// kernels of gelu_avx512.cpp on 8 lanes, with the same formulas and the same
// contract (within the tests' float64 bounds, not bit-equal to the generic
// loops of row_math.cpp, whose exp has no fused multiply-adds).
//  - exp: the same reduction and degree-8 polynomial; 2^n is built in the
//    exponent bits (n + 127) << 23. With 2u clamped to [-80, 80], n stays in
//    [-116, 116], so 2^n and p 2^n are normal and the product is exact: the
//    same bits as vscalefps there.
//  - 1 / (1 + e): vrcpps (12 bits) plus one Newton step, about 2^-22
//    relative (the AVX-512 kernel starts from 14 bits, about 2^-28), instead
//    of a division, which costs 5-14 cycles per 8 lanes on AVX2 cores.
//  - Tails: vmaskmovps loads zeros past the end and stores only the lanes in
//    range, as the masked loads and stores of the AVX-512 kernel do.
// A NaN input propagates through the factor x (the clamp turns it into -80).
// The exact (erf) GELU's kernels follow, the same operations as the scalar
// reference of gelu_erf.hpp on 8 lanes (the same bits).
#include <immintrin.h>

#include "cpu/target.hpp"
#include "kernels/gelu_erf.hpp"
#include "kernels/row_math.hpp"
#include "kernels/vec_math.hpp"

namespace mantissa::kernels {
namespace {

// e^x for x in [-80, 80].
MANTISSA_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kExpLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpTaylor[0]);
  for (int k = 1; k < 9; ++k) p = _mm256_fmadd_ps(r, p, _mm256_set1_ps(kExpTaylor[k]));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// s = sigmoid(2u) and e = e^-2u of 8 inputs.
struct Sigmoid8 {
  __m256 s, e;
};
MANTISSA_AVX2 inline Sigmoid8 sigmoid2u(__m256 v) {
  const __m256 w = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(kGeluCubic), _mm256_mul_ps(v, v)), v, v);
  __m256 m2u = _mm256_mul_ps(_mm256_set1_ps(-2.0f * kGeluScale), w);
  m2u = _mm256_min_ps(_mm256_max_ps(m2u, _mm256_set1_ps(-80.0f)), _mm256_set1_ps(80.0f));
  const __m256 e = exp8(m2u);
  const __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), e);
  const __m256 r = _mm256_rcp_ps(d);
  const __m256 s = _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(1.0f)), r);
  return {s, e};
}

// Lanes [0, k) on, k < 8.
MANTISSA_AVX2 inline __m256i first_lanes(int64_t k) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(k)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

MANTISSA_AVX2 inline __m256 gelu8(__m256 v, __m256 sc) { return _mm256_mul_ps(sc, _mm256_mul_ps(v, sigmoid2u(v).s)); }

// slope = s + 2 x s (e s) du/dx, du/dx = sqrt(2/pi) (1 + 3 c x^2); returns base + slope (scale dout).
MANTISSA_AVX2 inline __m256 gelu_grad8(__m256 v, __m256 dout, __m256 base, __m256 sc) {
  const Sigmoid8 g = sigmoid2u(v);
  const __m256 du = _mm256_mul_ps(_mm256_set1_ps(kGeluScale),
                                  _mm256_fmadd_ps(_mm256_set1_ps(3.0f * kGeluCubic), _mm256_mul_ps(v, v), _mm256_set1_ps(1.0f)));
  const __m256 tail = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(v, v), g.s), _mm256_mul_ps(g.e, g.s)), du);
  const __m256 slope = _mm256_add_ps(g.s, tail);
  return _mm256_add_ps(base, _mm256_mul_ps(slope, _mm256_mul_ps(sc, dout)));
}

// The exact GELU's shared terms (gelu_erf.hpp), operation for operation as gelu_erf_parts.
struct ErfParts8 {
  __m256 a, th, p, s1, s2;
};
MANTISSA_AVX2 MANTISSA_NO_CONTRACT inline ErfParts8 erf_parts8(__m256 x) {
  ErfParts8 g;
  const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  g.a = _mm256_min_ps(_mm256_set1_ps(kErfClamp), ax);  // NaN stays NaN (second operand)
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(kErfT), _mm256_add_ps(_mm256_set1_ps(kErfT), g.a));
  const __m256 s = _mm256_sub_ps(t, _mm256_set1_ps(kErfMid));
  __m256 h = _mm256_set1_ps(kErfH[10]);
  for (int k = 9; k >= 0; --k) h = _mm256_fmadd_ps(h, s, _mm256_set1_ps(kErfH[k]));
  g.th = _mm256_mul_ps(t, h);
  const __m256 sq = _mm256_mul_ps(g.a, g.a);
  const __m256 sq_lo = _mm256_fmsub_ps(g.a, g.a, sq);
  const __m256 y = _mm256_mul_ps(_mm256_set1_ps(-0.5f), sq);
  const __m256 round = _mm256_set1_ps(kErfRound);
  const __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(y, _mm256_set1_ps(kExpLog2e)), round), round);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Hi), y);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpTaylor[0]);
  for (int k = 1; k < 9; ++k) p = _mm256_fmadd_ps(r, p, _mm256_set1_ps(kExpTaylor[k]));
  g.p = _mm256_fmadd_ps(p, _mm256_mul_ps(_mm256_set1_ps(-0.5f), sq_lo), p);
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  g.s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  g.s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return g;
}

MANTISSA_AVX2 MANTISSA_NO_CONTRACT inline __m256 poly5_8(const float (&c)[6], __m256 u) {
  __m256 r = _mm256_set1_ps(c[5]);
  for (int k = 4; k >= 0; --k) r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(c[k]));
  return r;
}

MANTISSA_AVX2 MANTISSA_NO_CONTRACT inline __m256 gelu_erf8(__m256 x, __m256 sc) {
  const ErfParts8 g = erf_parts8(x);
  const __m256 m = _mm256_mul_ps(g.p, g.th);
  const __m256 neg_a = _mm256_xor_ps(g.a, _mm256_set1_ps(-0.0f));
  const __m256 neg = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(neg_a, m), g.s1), g.s2);
  const __m256 q = _mm256_mul_ps(_mm256_mul_ps(m, g.s1), g.s2);
  const __m256 pos = _mm256_mul_ps(x, _mm256_sub_ps(_mm256_set1_ps(1.0f), q));
  const __m256 small = _mm256_mul_ps(x, _mm256_fmadd_ps(x, poly5_8(kErfP, _mm256_mul_ps(x, x)), _mm256_set1_ps(0.5f)));
  const __m256 large = _mm256_blendv_ps(pos, neg, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  return _mm256_mul_ps(sc, _mm256_blendv_ps(large, small, _mm256_cmp_ps(g.a, _mm256_set1_ps(kErfSmall), _CMP_LT_OQ)));
}

// base + slope (scale dout)
MANTISSA_AVX2 MANTISSA_NO_CONTRACT inline __m256 gelu_erf_grad8(__m256 x, __m256 dout, __m256 base, __m256 sc) {
  const ErfParts8 g = erf_parts8(x);
  const __m256 f = _mm256_fnmadd_ps(g.a, _mm256_set1_ps(kInvSqrt2Pi), g.th);
  const __m256 w = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(g.p, f), g.s1), g.s2);
  const __m256 large =
      _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), w), w, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  const __m256 small = _mm256_fmadd_ps(x, poly5_8(kErfR, _mm256_mul_ps(x, x)), _mm256_set1_ps(0.5f));
  const __m256 slope = _mm256_blendv_ps(large, small, _mm256_cmp_ps(g.a, _mm256_set1_ps(kErfSmall), _CMP_LT_OQ));
  return _mm256_add_ps(base, _mm256_mul_ps(slope, _mm256_mul_ps(sc, dout)));
}

}  // namespace

MANTISSA_AVX2 void gelu_forward_avx2(float* out, const float* x, int64_t n, float scale) {
  const __m256 sc = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, gelu8(_mm256_loadu_ps(x + i), sc));
  if (i < n) {
    const __m256i m = first_lanes(n - i);
    _mm256_maskstore_ps(out + i, m, gelu8(_mm256_maskload_ps(x + i, m), sc));
  }
}

// 0 + when not accumulating: a -0 product gives +0, as += into zeros.
MANTISSA_AVX2 void gelu_backward_avx2(float* dx, const float* x, const float* dout, int64_t n, bool accumulate,
                                      float scale) {
  const __m256 sc = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 base = accumulate ? _mm256_loadu_ps(dx + i) : _mm256_setzero_ps();
    _mm256_storeu_ps(dx + i, gelu_grad8(_mm256_loadu_ps(x + i), _mm256_loadu_ps(dout + i), base, sc));
  }
  if (i < n) {
    const __m256i m = first_lanes(n - i);
    const __m256 base = accumulate ? _mm256_maskload_ps(dx + i, m) : _mm256_setzero_ps();
    const __m256 d = gelu_grad8(_mm256_maskload_ps(x + i, m), _mm256_maskload_ps(dout + i, m), base, sc);
    _mm256_maskstore_ps(dx + i, m, d);
  }
}

MANTISSA_AVX2 MANTISSA_NO_CONTRACT void gelu_erf_forward_avx2(float* out, const float* x, int64_t n, float scale) {
  const __m256 sc = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, gelu_erf8(_mm256_loadu_ps(x + i), sc));
  if (i < n) {
    const __m256i m = first_lanes(n - i);
    _mm256_maskstore_ps(out + i, m, gelu_erf8(_mm256_maskload_ps(x + i, m), sc));
  }
}

MANTISSA_AVX2 MANTISSA_NO_CONTRACT void gelu_erf_backward_avx2(float* dx, const float* x, const float* dout, int64_t n, bool accumulate,
                                          float scale) {
  const __m256 sc = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 base = accumulate ? _mm256_loadu_ps(dx + i) : _mm256_setzero_ps();
    _mm256_storeu_ps(dx + i, gelu_erf_grad8(_mm256_loadu_ps(x + i), _mm256_loadu_ps(dout + i), base, sc));
  }
  if (i < n) {
    const __m256i m = first_lanes(n - i);
    const __m256 base = accumulate ? _mm256_maskload_ps(dx + i, m) : _mm256_setzero_ps();
    _mm256_maskstore_ps(dx + i, m, gelu_erf_grad8(_mm256_maskload_ps(x + i, m), _mm256_maskload_ps(dout + i, m), base, sc));
  }
}

}  // namespace mantissa::kernels
