// Adam's per-element update, shared by the fp32 path (adam.cpp) and the
// low-precision moment path (adam_lowp.cpp) so both give the same bits.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "cpu/target.hpp"
#include "mantissa/cpu/isa.hpp"

namespace mantissa::optim::detail {

struct AdamScalars {
  float decay_factor;   // AdamW: 1 - lr*wd (1 when not decoupled or no decay)
  float l2;             // Adam: wd added to the gradient (0 for AdamW)
  float one_minus_b1, b2, one_minus_b2;
  float step_size;      // lr / (1 - beta1^t)
  float inv_bc2_sqrt;   // 1 / sqrt(1 - beta2^t)
  float eps;
};

// One element of torch.optim.Adam/AdamW's single-tensor update in fp32, in
// PyTorch's operation order: decay, m.lerp_(g, 1-b1), v.mul_(b2).addcmul_(g, g,
// 1-b2), denom = sqrt(v)/sqrt(bc2) + eps, p.addcdiv_(m, denom, -step_size).
// Written with explicit fused multiply-adds so that the AVX-512 path below
// gives the same bits.
inline void adam_element(float& p, float g_in, float& m, float& v, const AdamScalars& s) {
  const float w = p * s.decay_factor;
  const float g = std::fma(s.l2, w, g_in);
  const float mi = std::fma(s.one_minus_b1, g - m, m);
  const float vi = std::fma(v, s.b2, (s.one_minus_b2 * g) * g);
  m = mi;
  v = vi;
  const float denom = std::fma(std::sqrt(vi), s.inv_bc2_sqrt, s.eps);
  p = std::fma(-s.step_size, mi / denom, w);
}

// The moments adam_element stores, without touching p (same operations, same
// bits): the low-precision path needs their max before it can choose scales.
inline void adam_moments(float p, float g_in, float m, float v, const AdamScalars& s, float& mi, float& vi) {
  const float w = p * s.decay_factor;
  const float g = std::fma(s.l2, w, g_in);
  mi = std::fma(s.one_minus_b1, g - m, m);
  vi = std::fma(v, s.b2, (s.one_minus_b2 * g) * g);
}

inline void adam_chunk_scalar(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s) {
  for (int64_t i = 0; i < n; ++i) adam_element(p[i], g[i], m[i], v[i], s);
}

// Explicit intrinsics: GCC does not vectorise std::sqrt while errno
// semantics are on (the project does not build with -fno-math-errno).
__attribute__((target("avx512f"))) inline void adam_chunk_avx512(float* p, const float* g, float* m, float* v, int64_t n,
                                                           const AdamScalars& s) {
  const __m512 decay = _mm512_set1_ps(s.decay_factor), l2 = _mm512_set1_ps(s.l2);
  const __m512 omb1 = _mm512_set1_ps(s.one_minus_b1), b2 = _mm512_set1_ps(s.b2), omb2 = _mm512_set1_ps(s.one_minus_b2);
  const __m512 inv = _mm512_set1_ps(s.inv_bc2_sqrt), eps = _mm512_set1_ps(s.eps);
  const __m512 neg_step = _mm512_set1_ps(-s.step_size);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 w = _mm512_mul_ps(_mm512_loadu_ps(p + i), decay);
    const __m512 gi = _mm512_fmadd_ps(l2, w, _mm512_loadu_ps(g + i));
    const __m512 m0 = _mm512_loadu_ps(m + i);
    const __m512 mi = _mm512_fmadd_ps(omb1, _mm512_sub_ps(gi, m0), m0);
    const __m512 vi = _mm512_fmadd_ps(_mm512_loadu_ps(v + i), b2, _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    const __m512 denom = _mm512_fmadd_ps(_mm512_mask_sqrt_ps(vi, 0xFFFF, vi) /* unmasked form trips a GCC 12 -Wmaybe-uninitialized */, inv, eps);
    _mm512_storeu_ps(p + i, _mm512_fmadd_ps(neg_step, _mm512_div_ps(mi, denom), w));
  }
  adam_chunk_scalar(p + i, g + i, m + i, v + i, n - i, s);
}

// The same operations on 8 lanes: each is one IEEE operation (mul, sub, fma,
// sqrt, div), so every lane gives adam_element's bits.
MANTISSA_AVX2 inline void adam_chunk_avx2(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s) {
  const __m256 decay = _mm256_set1_ps(s.decay_factor), l2 = _mm256_set1_ps(s.l2);
  const __m256 omb1 = _mm256_set1_ps(s.one_minus_b1), b2 = _mm256_set1_ps(s.b2), omb2 = _mm256_set1_ps(s.one_minus_b2);
  const __m256 inv = _mm256_set1_ps(s.inv_bc2_sqrt), eps = _mm256_set1_ps(s.eps);
  const __m256 neg_step = _mm256_set1_ps(-s.step_size);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 w = _mm256_mul_ps(_mm256_loadu_ps(p + i), decay);
    const __m256 gi = _mm256_fmadd_ps(l2, w, _mm256_loadu_ps(g + i));
    const __m256 m0 = _mm256_loadu_ps(m + i);
    const __m256 mi = _mm256_fmadd_ps(omb1, _mm256_sub_ps(gi, m0), m0);
    const __m256 vi = _mm256_fmadd_ps(_mm256_loadu_ps(v + i), b2, _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(vi), inv, eps);
    _mm256_storeu_ps(p + i, _mm256_fmadd_ps(neg_step, _mm256_div_ps(mi, denom), w));
  }
  adam_chunk_scalar(p + i, g + i, m + i, v + i, n - i, s);
}

// Which chunk kernel runs: "avx512:adam", "avx2:adam" or "scalar:adam".
inline const char* adam_implementation() {
  const cpu::Isa isa = cpu::active_isa();
  return isa >= cpu::Isa::avx512 ? "avx512:adam" : isa >= cpu::Isa::avx2 ? "avx2:adam" : "scalar:adam";
}

inline void adam_chunk(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s) {
  const cpu::Isa isa = cpu::active_isa();
  if (isa >= cpu::Isa::avx512) adam_chunk_avx512(p, g, m, v, n, s);
  else if (isa >= cpu::Isa::avx2) adam_chunk_avx2(p, g, m, v, n, s);
  else adam_chunk_scalar(p, g, m, v, n, s);
}


}  // namespace mantissa::optim::detail
