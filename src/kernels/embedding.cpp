// Token + position embeddings: out [B*T, C] = wte[tokens[b, t]] + wpe[t].
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/parallel.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/cpu/profile.hpp"

namespace mantissa::kernels {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C, float scale) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::embedding);
  for (int64_t i = 0; i < B * T; ++i) {
    if (tokens[i] < 0) {
      throw std::invalid_argument("embedding: negative token id " + std::to_string(tokens[i]) +
                                  " at position " + std::to_string(i));
    }
  }
#pragma omp parallel for schedule(static) if (parallel_rows(B * T, C))
  for (int64_t i = 0; i < B * T; ++i) {
    const float* e = wte + static_cast<int64_t>(tokens[i]) * C;
    const float* p = wpe + (i % T) * C;
    float* o = out + i * C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) o[j] = scale * (e[j] + p[j]);
  }
}

// dwte: a token may repeat, so threads split the columns (not the rows) and
// walk the rows in order: race-free and independent of the thread count.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C, float wte_scale, float wpe_scale) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::embedding);
  if (dwte) {
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (parallel_rows(B * T, C) && blocks > 1)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t j0 = b * kBlock, j1 = std::min(C, j0 + kBlock);
      for (int64_t i = 0; i < B * T; ++i) {
        float* d = dwte + static_cast<int64_t>(tokens[i]) * C;
        const float* g = dout + i * C;
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) d[j] += wte_scale * g[j];
      }
    }
  }
  if (dwpe) {
#pragma omp parallel for schedule(static) if (parallel_rows(T, B * C))
    for (int64_t t = 0; t < T; ++t) {
      float* d = dwpe + t * C;
      for (int64_t b = 0; b < B; ++b) {
        const float* g = dout + (b * T + t) * C;
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) d[j] += wpe_scale * g[j];
      }
    }
  }
}

}  // namespace mantissa::kernels
