// The exact (erf) GELU's family: the scalar reference of gelu_erf.hpp in
// compiler-vectorised loops (its fused multiply-adds are std::fma, exact in
// every clone, and no others: MANTISSA_NO_CONTRACT), the AVX-512 and AVX2
// kernels, and the table choosing one.
#include "kernels/gelu_erf.hpp"

#include "mantissa/cpu/isa.hpp"

namespace mantissa::kernels {
namespace {

MANTISSA_CLONES MANTISSA_NO_CONTRACT void gelu_erf_forward_generic(float* out, const float* x, int64_t n, float scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = scale * gelu_erf_ref(x[i]);
}

MANTISSA_CLONES MANTISSA_NO_CONTRACT void gelu_erf_backward_generic(float* dx, const float* x, const float* dout, int64_t n,
                                               bool accumulate, float scale) {
  if (accumulate) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dx[i] += gelu_erf_slope_ref(x[i]) * (scale * dout[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dx[i] = 0.0f + gelu_erf_slope_ref(x[i]) * (scale * dout[i]);  // -0 -> +0, as +=
  }
}

using ForwardFn = void (*)(float*, const float*, int64_t, float);
const cpu::Impl<ForwardFn> kForward[] = {
    {"avx512:gelu_erf", cpu::Isa::avx512, gelu_erf_forward_avx512},
    {"avx2:gelu_erf", cpu::Isa::avx2, gelu_erf_forward_avx2},
    {"generic:gelu_erf", cpu::Isa::scalar, gelu_erf_forward_generic},
};

using BackwardFn = void (*)(float*, const float*, const float*, int64_t, bool, float);
const cpu::Impl<BackwardFn> kBackward[] = {
    {"avx512:gelu_erf", cpu::Isa::avx512, gelu_erf_backward_avx512},
    {"avx2:gelu_erf", cpu::Isa::avx2, gelu_erf_backward_avx2},
    {"generic:gelu_erf", cpu::Isa::scalar, gelu_erf_backward_generic},
};

}  // namespace

void span_gelu_erf_forward(float* out, const float* x, int64_t n, float scale) {
  cpu::select(kForward).fn(out, x, n, scale);
}

void span_gelu_erf_backward(float* dx, const float* x, const float* dout, int64_t n, bool accumulate, float scale) {
  cpu::select(kBackward).fn(dx, x, dout, n, accumulate, scale);
}

const char* gelu_erf_implementation() { return cpu::select(kForward).name; }

}  // namespace mantissa::kernels
