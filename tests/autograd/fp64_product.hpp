// FP64 reference products for the cast-product tests: C = op(A) op(B) with
// the sum of |terms|, and a check of fp32-accumulated results against it.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

// C [M, N] = op(A) op(B) in FP64; also the sum of |terms| for the tolerance.
inline void ref_product(const std::vector<float>& A, const std::vector<float>& B, int64_t M, int64_t N, int64_t K, bool ta,
                 bool tb, std::vector<double>& C, std::vector<double>& mag) {
  C.assign(size_t(M * N), 0);
  mag.assign(size_t(M * N), 0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[size_t(k * M + i)] : A[size_t(i * K + k)];
        const double b = tb ? B[size_t(j * K + k)] : B[size_t(k * N + j)];
        C[size_t(i * N + j)] += a * b;
        mag[size_t(i * N + j)] += std::fabs(a * b);
      }
}

// fp32 accumulation of K exact products: error <= K * 2^-24 * sum|terms| (loose bound, tight in practice).
inline void expect_close(const float* got, const std::vector<double>& want, const std::vector<double>& mag, int64_t K,
                  const char* what) {
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    const double tol = (double(K) * 0x1p-24 + 0x1p-20) * mag[i] + 1e-30;
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i] << " (tol " << tol << ")";
      ++bad;
    }
  }
}
