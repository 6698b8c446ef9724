// Row kernels on x [N, C]: layer norm, bias, softmax, fused cross-entropy.
// Rows are independent, so each is threaded over rows; column reductions
// (dweight, dbias) use per-thread partial sums added in thread order.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/parallel.hpp"
#include "kernels/row_math.hpp"
#include "mantissa/formats/lookup.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/cpu/profile.hpp"

namespace mantissa::kernels {

// ---- layer norm -------------------------------------------------------------------
// Forward: mean, var over C in fp32 (two passes: no cancellation), then
// out = (x - mean) * rstd * weight + bias; rstd = 1/sqrt(var + eps).
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::norms);
#pragma omp parallel for schedule(static) if (parallel_rows(N, C))
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = x + i * C;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < C; ++j) s += xi[j];
    const float m = s / static_cast<float>(C);
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int64_t j = 0; j < C; ++j) v += (xi[j] - m) * (xi[j] - m);
    const float r = 1.0f / std::sqrt(v / static_cast<float>(C) + eps);
    float* oi = out + i * C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) oi[j] = (xi[j] - m) * r * weight[j] + bias[j];
    mean[i] = m;
    rstd[i] = r;
  }
}

// Backward (norm = (x - mean) rstd, dnorm = weight * dout):
//   dx += rstd (dnorm - mean(dnorm) - norm mean(dnorm norm))
//   dweight += sum_rows norm dout; dbias += sum_rows dout
namespace {
// row_x(i, scratch) gives row i of x in fp32 (scratch: C floats of this thread).
template <class RowX>
void layernorm_backward_impl(float* dx, float* dweight, float* dbias, const float* dout, RowX row_x,
                             const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  const bool par = parallel_rows(N, C);
  const int threads = par ? omp_get_max_threads() : 1;
  thread_local std::vector<float> partial;  // reused: no allocation in the steady state
  partial.assign(static_cast<size_t>(threads) * 2 * static_cast<size_t>(C), 0.0f);
  float* const partial_base = partial.data();  // the caller's copy, shared with the team
#pragma omp parallel num_threads(threads) if (par)
  {
    float* dw = partial_base + static_cast<size_t>(omp_get_thread_num()) * 2 * static_cast<size_t>(C);
    float* db = dw + C;
    thread_local std::vector<float> row_scratch;
    row_scratch.resize(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float* xi = row_x(i, row_scratch.data());
      const float* gi = dout + i * C;
      const float m = mean[i], r = rstd[i];
      float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int64_t j = 0; j < C; ++j) {
        const float norm = (xi[j] - m) * r;
        const float dnorm = weight[j] * gi[j];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= static_cast<float>(C);
      dnorm_norm_mean /= static_cast<float>(C);
      float* dxi = dx + i * C;
#pragma omp simd
      for (int64_t j = 0; j < C; ++j) {
        const float norm = (xi[j] - m) * r;
        const float dnorm = weight[j] * gi[j];
        dw[j] += norm * gi[j];
        db[j] += gi[j];
        dxi[j] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
      }
    }
  }
  for (int t = 0; t < threads; ++t) {
    const float* dw = partial_base + static_cast<size_t>(t) * 2 * static_cast<size_t>(C);
    if (dweight) {
      for (int64_t j = 0; j < C; ++j) dweight[j] += dw[j];
    }
    if (dbias) {
      for (int64_t j = 0; j < C; ++j) dbias[j] += dw[C + j];
    }
  }
}
}  // namespace

void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::norms);
  layernorm_backward_impl(dx, dweight, dbias, dout, [x, C](int64_t i, float*) { return x + i * C; }, weight, mean,
                          rstd, N, C);
}

// x kept as bf16 codes: each row widened into the thread's scratch (exact),
// so the result has the bits of layernorm_backward on the widened x.
void layernorm_backward_bf16x(float* dx, float* dweight, float* dbias, const float* dout, const uint16_t* x16,
                              const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::norms);
  layernorm_backward_impl(
      dx, dweight, dbias, dout,
      [x16, C](int64_t i, float* scratch) {
        span_from_bf16(scratch, x16 + i * C, C);
        return static_cast<const float*>(scratch);
      },
      weight, mean, rstd, N, C);
}

void layernorm_backward_codes(float* dx, float* dweight, float* dbias, const float* dout, const uint8_t* codes,
                              const formats::Table16& table, float fold, const float* weight, const float* mean,
                              const float* rstd, int64_t N, int64_t C) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::norms);
  layernorm_backward_impl(
      dx, dweight, dbias, dout,
      [&table, codes, fold, C](int64_t i, float* scratch) {
        formats::lookup16_widen(table, codes + i * C, scratch, static_cast<size_t>(C), &fold, static_cast<size_t>(C));
        return static_cast<const float*>(scratch);
      },
      weight, mean, rstd, N, C);
}

// ---- bias ------------------------------------------------------------------------------
void bias_add(float* out, const float* x, const float* bias, int64_t N, int64_t C) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
#pragma omp parallel for schedule(static) if (parallel_rows(N, C))
  for (int64_t i = 0; i < N; ++i) {
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) out[i * C + j] = x[i * C + j] + bias[j];
  }
}

// Column sums: threads own disjoint column blocks and walk all rows, so the
// sum order is fixed (row order) whatever the thread count.
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (parallel_rows(N, C) && blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * kBlock, j1 = std::min(C, j0 + kBlock);
    float acc[kBlock] = {};
    span_column_sums(acc, dout + j0, N, C, j1 - j0);
    for (int64_t j = j0; j < j1; ++j) dbias[j] += acc[j - j0];
  }
}

// ---- softmax -------------------------------------------------------------------------------
void softmax_forward(float* y, const float* x, int64_t N, int64_t C) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::norms);
#pragma omp parallel for schedule(static) if (parallel_rows(N, C))
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = x + i * C;
    float* yi = y + i * C;
    const float mx = span_max(xi, C);
    const float s = span_exp_sum(yi, xi, C, mx);
    span_scale(yi, C, 1.0f / s);
  }
}

void softmax_backward(float* dx, const float* y, const float* dy, int64_t N, int64_t C) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::norms);
#pragma omp parallel for schedule(static) if (parallel_rows(N, C))
  for (int64_t i = 0; i < N; ++i) {
    const float* yi = y + i * C;
    const float* gi = dy + i * C;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < C; ++j) dot += yi[j] * gi[j];
    float* dxi = dx + i * C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) dxi[j] += yi[j] * (gi[j] - dot);
  }
}

// ---- fused softmax cross-entropy ----------------------------------------------------------
// One pass per row: max, sum of exp, loss = log(sum) + max - x[target];
// dlogits = grad_scale (p - onehot). Row losses go to a buffer and are added
// in row order in fp64, so the sum does not depend on the thread count.
double cross_entropy(const float* logits, const int32_t* targets, int64_t N, int64_t V,
                     float grad_scale, float* losses, float* dlogits, int64_t* count) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::norms);
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] >= V) {
      throw std::invalid_argument("cross_entropy: target " + std::to_string(targets[i]) + " at row " +
                                  std::to_string(i) + " is outside the vocabulary of " +
                                  std::to_string(V));
    }
  }
  thread_local std::vector<float> scratch;
  if (!losses) {
    scratch.resize(static_cast<size_t>(N));
    losses = scratch.data();
  }
#pragma omp parallel for schedule(static) if (parallel_rows(N, V))
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = logits + i * V;
    float* gi = dlogits ? dlogits + i * V : nullptr;
    const int32_t t = targets[i];
    if (t < 0) {
      losses[i] = 0.0f;
      if (gi) std::fill(gi, gi + V, 0.0f);
      continue;
    }
    const float mx = span_max(xi, V);
    float s;
    if (gi) {
      s = span_exp_sum(gi, xi, V, mx);
      span_scale(gi, V, grad_scale / s);
      gi[t] -= grad_scale;
    } else {
      s = span_sum_exp(xi, V, mx);
    }
    losses[i] = std::log(s) + mx - xi[t];
  }
  double total = 0.0;
  int64_t counted = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] < 0) continue;
    total += losses[i];
    ++counted;
  }
  if (count) *count = counted;
  return total;
}

}  // namespace mantissa::kernels
