// The exp-based spans of row_math.cpp (softmax and cross-entropy sums,
// SwiGLU) on AVX2 registers. GCC leaves their loops scalar on AVX2 targets:
// vexp's range selects, under -ftrapping-math, are not if-converted without
// AVX-512 masks. Here vexp is written out on 8 lanes with the same operations
// in the same order (no fused multiply-adds, since vexp has none) and the
// selects as blends, so every exp, sigmoid and SwiGLU value has the scalar
// reference's bits. Only the sums of span_exp_sum / span_sum_exp differ from
// a serial loop: 8 lane partial sums, added pairwise at the end (as the
// compiler's vectorised clones already sum in lanes).
// GCC contracts a multiply and an add into an FMA wherever the target has
// FMA (C++ defaults to -ffp-contract=fast), intrinsics included; the scalar
// reference, built for targets without FMA, has none, so this file turns
// contraction off.
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include "cpu/target.hpp"
#include "kernels/row_math.hpp"
#include "kernels/vec_math.hpp"

namespace mantissa::kernels {
namespace {

MANTISSA_AVX2 inline __m256 set1(float v) { return _mm256_set1_ps(v); }

// vexp on 8 lanes, bit for bit. The clamp differs from vexp's only for NaN
// (88 here, -87 there), whose result is the input either way.
MANTISSA_AVX2 inline __m256 vexp8(__m256 x) {
  const __m256 round = set1(12582912.0f);
  const __m256 xc = _mm256_max_ps(_mm256_min_ps(x, set1(88.0f)), set1(-87.0f));
  const __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(xc, set1(kExpLog2e)), round), round);
  const __m256 r = _mm256_sub_ps(_mm256_sub_ps(xc, _mm256_mul_ps(n, set1(kExpLn2Hi))), _mm256_mul_ps(n, set1(kExpLn2Lo)));
  __m256 p = _mm256_add_ps(set1(kExpTaylor[1]), _mm256_mul_ps(r, set1(kExpTaylor[0])));
  for (int k = 2; k < 9; ++k) p = _mm256_add_ps(set1(kExpTaylor[k]), _mm256_mul_ps(r, p));
  const __m256i e = _mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127));
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
  y = _mm256_blendv_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000)), _mm256_cmp_ps(x, set1(88.0f), _CMP_GT_OQ));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, set1(-87.0f), _CMP_LT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// -x: a sign flip, as the scalar code's negation.
MANTISSA_AVX2 inline __m256 neg(__m256 x) { return _mm256_xor_ps(x, set1(-0.0f)); }

// vsigmoid: 1 / (1 + e^-x), a true division as there.
MANTISSA_AVX2 inline __m256 vsigmoid8(__m256 x) {
  const __m256 one = set1(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, vexp8(neg(x))));
}

// Lanes [0, k) on, k < 8.
MANTISSA_AVX2 inline __m256i first_lanes(int64_t k) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(k)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

MANTISSA_AVX2 inline float lane_sum(__m256 v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

// The SwiGLU products in the scalar expressions' left-to-right order.
MANTISSA_AVX2 inline __m256 swiglu8(__m256 g, __m256 u, __m256 alpha) {
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(alpha, g), vsigmoid8(g)), u);
}

// The two backward terms: alpha x s dy and beta s (1 + x (1 - s)) u dy.
struct SwigluGrads {
  __m256 du, dg;
};
MANTISSA_AVX2 inline SwigluGrads swiglu_grads8(__m256 x, __m256 u, __m256 d, __m256 alpha, __m256 beta) {
  const __m256 one = set1(1.0f), s = vsigmoid8(x);
  const __m256 k = _mm256_add_ps(one, _mm256_mul_ps(x, _mm256_sub_ps(one, s)));
  return {_mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(alpha, x), s), d),
          _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(beta, s), k), u), d)};
}

}  // namespace

MANTISSA_AVX2 float span_exp_sum_avx2(float* y, const float* x, int64_t n, float shift) {
  const __m256 sh = set1(shift);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = vexp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
    _mm256_storeu_ps(y + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    const __m256i m = first_lanes(n - i);
    const __m256 e = vexp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), sh));
    _mm256_maskstore_ps(y + i, m, e);
    acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(m)));
  }
  return lane_sum(acc);
}

MANTISSA_AVX2 float span_sum_exp_avx2(const float* x, int64_t n, float shift) {
  const __m256 sh = set1(shift);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, vexp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh)));
  if (i < n) {
    const __m256i m = first_lanes(n - i);
    const __m256 e = vexp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), sh));
    acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(m)));
  }
  return lane_sum(acc);
}

MANTISSA_AVX2 void span_swiglu_forward_avx2(float* out, const float* g, const float* u, int64_t n, float alpha) {
  const __m256 a = set1(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i), a));
  if (i < n) {
    const __m256i m = first_lanes(n - i);
    _mm256_maskstore_ps(out + i, m, swiglu8(_mm256_maskload_ps(g + i, m), _mm256_maskload_ps(u + i, m), a));
  }
}

// du += alpha x s dy, dg += beta s (1 + x (1 - s)) u dy; a null output is
// skipped. x is loaded before either store (du may alias g).
MANTISSA_AVX2 void span_swiglu_backward_avx2(float* dg, float* du, const float* g, const float* u, const float* dy,
                                             int64_t n, float alpha, float beta) {
  const __m256 a = set1(alpha), b = set1(beta);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const SwigluGrads t = swiglu_grads8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i),
                                        _mm256_loadu_ps(dy + i), a, b);
    if (du) _mm256_storeu_ps(du + i, _mm256_add_ps(_mm256_loadu_ps(du + i), t.du));
    if (dg) _mm256_storeu_ps(dg + i, _mm256_add_ps(_mm256_loadu_ps(dg + i), t.dg));
  }
  if (i < n) {
    const __m256i m = first_lanes(n - i);
    const SwigluGrads t = swiglu_grads8(_mm256_maskload_ps(g + i, m), _mm256_maskload_ps(u + i, m),
                                        _mm256_maskload_ps(dy + i, m), a, b);
    if (du) _mm256_maskstore_ps(du + i, m, _mm256_add_ps(_mm256_maskload_ps(du + i, m), t.du));
    if (dg) _mm256_maskstore_ps(dg + i, m, _mm256_add_ps(_mm256_maskload_ps(dg + i, m), t.dg));
  }
}

}  // namespace mantissa::kernels
