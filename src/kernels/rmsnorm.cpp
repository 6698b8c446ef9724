// RMSNorm on rows x [N, C], in fp32 like the layer norm kernels beside it:
//   forward  out = alpha x r w,  r = 1/sqrt(mean(x^2) + eps)               (r [N] kept)
//   backward xh = x r, dx += bx r (w dy - xh mean(xh w dy)),  dw += bw sum_rows xh dy
// Rows are threaded; dw is summed per thread and the partial sums are added in
// thread order, so a thread count always gives the same bits.
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/parallel.hpp"
#include "kernels/row_math.hpp"
#include "mantissa/cpu/profile.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace mantissa::kernels {

void rmsnorm_forward(float* out, float* rinv, const float* x, const float* weight, float alpha, int64_t N, int64_t C,
                     float eps) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::norms);
#pragma omp parallel for schedule(static) if (parallel_rows(N, C))
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = x + i * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < C; ++j) ss += xi[j] * xi[j];
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
    const float ar = alpha * r;
    float* oi = out + i * C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) oi[j] = xi[j] * ar * weight[j];
    rinv[i] = r;
  }
}

namespace {
// row_x(i, scratch) gives row i of x in fp32 (scratch: C floats of this thread).
template <class RowX>
void rmsnorm_backward_impl(float* dx, float* dweight, const float* dout, RowX row_x, const float* weight,
                           const float* rinv, float bx, float bw, int64_t N, int64_t C) {
  const bool par = parallel_rows(N, C);
  const int threads = par ? omp_get_max_threads() : 1;
  thread_local std::vector<float> partial;  // reused: no allocation in the steady state
  partial.assign(static_cast<size_t>(threads) * static_cast<size_t>(C), 0.0f);
  float* const partial_base = partial.data();
#pragma omp parallel num_threads(threads) if (par)
  {
    float* dw = partial_base + static_cast<size_t>(omp_get_thread_num()) * static_cast<size_t>(C);
    thread_local std::vector<float> row_scratch;
    row_scratch.resize(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float* xi = row_x(i, row_scratch.data());
      const float* gi = dout + i * C;
      const float r = rinv[i];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < C; ++j) {
        const float xh = xi[j] * r;
        dot += xh * weight[j] * gi[j];
        dw[j] += xh * gi[j];
      }
      dot /= static_cast<float>(C);
      if (dx) {
        float* dxi = dx + i * C;
        const float br = bx * r;
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) dxi[j] += br * (weight[j] * gi[j] - xi[j] * r * dot);
      }
    }
  }
  if (!dweight) return;
  for (int t = 0; t < threads; ++t) {
    const float* dw = partial_base + static_cast<size_t>(t) * static_cast<size_t>(C);
    for (int64_t j = 0; j < C; ++j) dweight[j] += bw * dw[j];
  }
}
}  // namespace

void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rinv, float bx, float bw, int64_t N, int64_t C) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::norms);
  rmsnorm_backward_impl(dx, dweight, dout, [x, C](int64_t i, float*) { return x + i * C; }, weight, rinv, bx, bw, N,
                        C);
}

void rmsnorm_backward_bf16x(float* dx, float* dweight, const float* dout, const uint16_t* x16, const float* weight,
                            const float* rinv, float bx, float bw, int64_t N, int64_t C) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::norms);
  rmsnorm_backward_impl(
      dx, dweight, dout,
      [x16, C](int64_t i, float* scratch) {
        span_from_bf16(scratch, x16 + i * C, C);
        return static_cast<const float*>(scratch);
      },
      weight, rinv, bx, bw, N, C);
}

}  // namespace mantissa::kernels
