#include "kernels/row_math.hpp"

#include <algorithm>
#include <limits>

#include "mantissa/formats/bf16.hpp"
#include "kernels/vec_math.hpp"
#include "mantissa/cpu/isa.hpp"

namespace mantissa::kernels {

MANTISSA_CLONES float span_max(const float* x, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  return mx;
}

namespace {
MANTISSA_CLONES float span_exp_sum_generic(float* y, const float* x, int64_t n, float shift) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    const float e = vexp(x[i] - shift);
    y[i] = e;
    s += e;
  }
  return s;
}

MANTISSA_CLONES float span_sum_exp_generic(const float* x, int64_t n, float shift) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += vexp(x[i] - shift);
  return s;
}
}  // namespace

// The exp spans take the AVX2 kernels (row_math_avx2.cpp) on the avx2 tier
// only: the compiler leaves their AVX2 clones scalar (row_math_avx2.cpp says
// why); AVX-512 hosts keep their vectorised clones.
float span_exp_sum(float* y, const float* x, int64_t n, float shift) {
  if (cpu::active_isa() == cpu::Isa::avx2) return span_exp_sum_avx2(y, x, n, shift);
  return span_exp_sum_generic(y, x, n, shift);
}

float span_sum_exp(const float* x, int64_t n, float shift) {
  if (cpu::active_isa() == cpu::Isa::avx2) return span_sum_exp_avx2(x, n, shift);
  return span_sum_exp_generic(x, n, shift);
}

MANTISSA_CLONES void span_scale(float* y, int64_t n, float s) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

namespace {
MANTISSA_CLONES void span_swiglu_forward_generic(float* out, const float* g, const float* u, int64_t n, float alpha) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = alpha * g[i] * vsigmoid(g[i]) * u[i];
}

MANTISSA_CLONES void span_swiglu_backward_generic(float* dg, float* du, const float* g, const float* u,
                                                  const float* dy, int64_t n, float alpha, float beta) {
  if (du && dg) {  // one sigmoid per element for both
    // g[i] read once: re-read after the store to du (which may alias g), the
    // compiler would contract 1 + g (1 - s) into an fma, which the loops
    // below do not, and the bits would differ from theirs.
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float x = g[i], s = vsigmoid(x);
      du[i] += alpha * x * s * dy[i];
      dg[i] += beta * s * (1.0f + x * (1.0f - s)) * u[i] * dy[i];
    }
    return;
  }
  if (du) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) du[i] += alpha * g[i] * vsigmoid(g[i]) * dy[i];
  }
  if (dg) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float s = vsigmoid(g[i]);
      dg[i] += beta * s * (1.0f + g[i] * (1.0f - s)) * u[i] * dy[i];
    }
  }
}
}  // namespace

void span_swiglu_forward(float* out, const float* g, const float* u, int64_t n, float alpha) {
  if (cpu::active_isa() == cpu::Isa::avx2) return span_swiglu_forward_avx2(out, g, u, n, alpha);
  span_swiglu_forward_generic(out, g, u, n, alpha);
}

void span_swiglu_backward(float* dg, float* du, const float* g, const float* u, const float* dy, int64_t n,
                          float alpha, float beta) {
  if (cpu::active_isa() == cpu::Isa::avx2) return span_swiglu_backward_avx2(dg, du, g, u, dy, n, alpha, beta);
  span_swiglu_backward_generic(dg, du, g, u, dy, n, alpha, beta);
}

namespace {
MANTISSA_CLONES void gelu_forward_generic(float* out, const float* x, int64_t n, float scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    out[i] = scale * (v * vsigmoid(2.0f * u));
  }
}
}  // namespace

// Ordered, best first (cpu::select); "generic" is compiler-vectorised C++.
using GeluForwardFn = void (*)(float*, const float*, int64_t, float);
const cpu::Impl<GeluForwardFn> kGeluForward[] = {
    {"avx512:gelu", cpu::Isa::avx512, gelu_forward_avx512},
    {"avx2:gelu", cpu::Isa::avx2, gelu_forward_avx2},
    {"generic:gelu", cpu::Isa::scalar, gelu_forward_generic},
};

void span_gelu_forward(float* out, const float* x, int64_t n, float scale) {
  cpu::select(kGeluForward).fn(out, x, n, scale);
}

namespace {
// d/dx x sigmoid(2u) = s + 2 x s (1 - s) du/dx, s = sigmoid(2u) = (1 + tanh u) / 2
inline float gelu_slope(float v) {
  const float u = kGeluScale * (v + kGeluCubic * v * v * v);
  // 1 - s = e s with e = exp(-2u): no cancellation where s is close to 1.
  const float e = vexp(-2.0f * u);
  const float s = 1.0f / (1.0f + e);
  const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
  // x below about -10.1: e = inf, s = 0 and e s = inf * 0 = NaN, where the
  // term's limit is 0 (the derivative there is below 1e-35).
  const float tail = s > 0.0f ? 2.0f * v * s * (e * s) * du : 0.0f;
  return s + tail;
}

// Two loops, not a select on `accumulate` inside one: the select keeps GCC
// from vectorising.
MANTISSA_CLONES void gelu_backward_generic(float* dx, const float* x, const float* dout, int64_t n, bool accumulate,
                                           float scale) {
  if (accumulate) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dx[i] += gelu_slope(x[i]) * (scale * dout[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dx[i] = 0.0f + gelu_slope(x[i]) * (scale * dout[i]);  // 0 + : a -0 product gives +0, as += into zeros
  }
}
}  // namespace

using GeluBackwardFn = void (*)(float*, const float*, const float*, int64_t, bool, float);
const cpu::Impl<GeluBackwardFn> kGeluBackward[] = {
    {"avx512:gelu", cpu::Isa::avx512, gelu_backward_avx512},
    {"avx2:gelu", cpu::Isa::avx2, gelu_backward_avx2},
    {"generic:gelu", cpu::Isa::scalar, gelu_backward_generic},
};

void span_gelu_backward(float* dx, const float* x, const float* dout, int64_t n, bool accumulate, float scale) {
  cpu::select(kGeluBackward).fn(dx, x, dout, n, accumulate, scale);
}

const char* gelu_implementation() { return cpu::select(kGeluForward).name; }

MANTISSA_CLONES void span_to_bf16(uint16_t* y, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = formats::round_bf16(x[i]);
}

MANTISSA_CLONES void span_from_bf16(float* y, const uint16_t* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = formats::widen_bf16(x[i]);
}

MANTISSA_CLONES void span_add_inplace(float* acc, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

MANTISSA_CLONES void span_column_sums(float* acc, const float* x, int64_t N, int64_t stride, int64_t w) {
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = x + i * stride;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) acc[j] += xi[j];
  }
}

}  // namespace mantissa::kernels
