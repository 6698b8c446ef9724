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
#include <immintrin.h>

#include "cpu/target.hpp"
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

}  // namespace mantissa::kernels
