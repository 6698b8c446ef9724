// Vectorised spans used by the row kernels (softmax, attention,
// cross-entropy, GELU). Each has an AVX-512 / AVX2 clone chosen at load time;
// the exp-based ones, which stay scalar in the AVX2 clone, also hand-written
// AVX2 kernels.
#pragma once

#include <cstdint>

namespace mantissa::kernels {

float span_max(const float* x, int64_t n);
// y[i] = exp(x[i] - shift); returns the sum (fp32). y may alias x.
float span_exp_sum(float* y, const float* x, int64_t n, float shift);
// sum of exp(x[i] - shift) without storing.
float span_sum_exp(const float* x, int64_t n, float shift);
void span_scale(float* y, int64_t n, float s);
// out = alpha g sigmoid(g) u (SwiGLU); backward: du += alpha silu(g) dy and
// dg += beta s (1 + g (1 - s)) u dy, s = sigmoid(g); a null output is skipped.
void span_swiglu_forward(float* out, const float* g, const float* u, int64_t n, float alpha);
void span_swiglu_backward(float* dg, float* du, const float* g, const float* u, const float* dy, int64_t n, float alpha,
                          float beta);
// The AVX2 kernels of the four spans above (row_math_avx2.cpp): the same
// values bit for bit (the sums in 8 lanes), taken on the avx2 tier.
float span_exp_sum_avx2(float* y, const float* x, int64_t n, float shift);
float span_sum_exp_avx2(const float* x, int64_t n, float shift);
void span_swiglu_forward_avx2(float* out, const float* g, const float* u, int64_t n, float alpha);
void span_swiglu_backward_avx2(float* dg, float* du, const float* g, const float* u, const float* dy, int64_t n,
                               float alpha, float beta);
inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluCubic = 0.044715f;
// y = 0.5 x (1 + tanh u) = x sigmoid(2u), u = kGeluScale (x + kGeluCubic x^3); out = scale y.
void span_gelu_forward(float* out, const float* x, int64_t n, float scale = 1.0f);
// dx (+)= gelu'(x) (scale dout): added when accumulate, else written (dx may then be dout).
// A scale of 1 multiplies exactly: the unscaled results keep their bits.
void span_gelu_backward(float* dx, const float* x, const float* dout, int64_t n, bool accumulate = true,
                        float scale = 1.0f);
// The AVX-512 GELU kernels behind the two spans above (gelu_avx512.cpp),
// used when cpu::active_isa() allows AVX-512 (its cap applies).
void gelu_forward_avx512(float* out, const float* x, int64_t n, float scale);
void gelu_backward_avx512(float* dx, const float* x, const float* dout, int64_t n, bool accumulate, float scale);
// Their 8-lane AVX2 + FMA ports (gelu_avx2.cpp), same contract.
void gelu_forward_avx2(float* out, const float* x, int64_t n, float scale);
void gelu_backward_avx2(float* dx, const float* x, const float* dout, int64_t n, bool accumulate, float scale);
// Memory-bound spans that the baseline ISA would run 4 lanes wide.
void span_to_bf16(uint16_t* y, const float* x, int64_t n);    // round to nearest even
void span_from_bf16(float* y, const uint16_t* x, int64_t n);  // exact
void span_add_inplace(float* acc, const float* x, int64_t n);  // acc += x
// acc[0..w) += sum over rows i < N of x[i * stride + 0..w), in row order.
void span_column_sums(float* acc, const float* x, int64_t N, int64_t stride, int64_t w);

// Causal softmax backward for query row t of T: g holds dP on entry and
// dS = P (dP - sum(P dP)) * scale on exit, with the masked columns j > t zero.
inline void causal_softmax_backward_row(float* g, const float* p, int64_t t, int64_t T, float scale) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j <= t; ++j) dot += p[j] * g[j];
#pragma omp simd
  for (int64_t j = 0; j <= t; ++j) g[j] = p[j] * (g[j] - dot) * scale;
  for (int64_t j = t + 1; j < T; ++j) g[j] = 0.0f;
}

}  // namespace mantissa::kernels
