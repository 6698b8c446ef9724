// RMSNorm kernels against float64 recomputation (forward, dx, dweight with
// their scales) and the bf16-input backward against the fp32 one bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "kernels/reference.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace mantissa::kernels {
namespace {

using test::kEps32;
using test::random_floats;

constexpr float kEpsNorm = 1e-5f;

// Threaded size (N x C large enough to split rows); odd C checks the vector tails.
TEST(RmsNorm, ForwardAndBackwardMatchFloat64) {
  for (const int64_t C : {int64_t{256}, int64_t{37}}) {
    const int64_t N = 300;
    const float alpha = 0.75f, bx = 1.5f, bw = 0.25f;
    const auto x = random_floats(N * C, 51, -3.0f, 3.0f), g = random_floats(N * C, 52);
    const auto w = random_floats(C, 53, 0.5f, 1.5f);
    std::vector<float> y(N * C), r(N), dx(N * C, 0.5f), dw(C, 0.125f);
    rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), alpha, N, C, kEpsNorm);
    rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), r.data(), bx, bw, N, C);
    std::vector<double> y_ref(N * C), dx_ref(N * C), dw_ref(C, 0.0);
    for (int64_t i = 0; i < N; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < C; ++j) ss += static_cast<double>(x[i * C + j]) * x[i * C + j];
      const double ri = 1.0 / std::sqrt(ss / static_cast<double>(C) + kEpsNorm);
      EXPECT_NEAR(r[i], ri, 8 * kEps32 * ri) << i;
      double dot = 0;
      for (int64_t j = 0; j < C; ++j) {
        const double xh = x[i * C + j] * ri;
        y_ref[i * C + j] = alpha * xh * w[j];
        dot += xh * w[j] * g[i * C + j];
        dw_ref[j] += xh * g[i * C + j];
      }
      dot /= static_cast<double>(C);
      for (int64_t j = 0; j < C; ++j)
        dx_ref[i * C + j] = 0.5 + bx * ri * (w[j] * g[i * C + j] - x[i * C + j] * ri * dot);
    }
    for (int64_t j = 0; j < C; ++j) dw_ref[j] = 0.125 + bw * dw_ref[j];
    test::expect_near_all(y, y_ref, 0, 16 * kEps32 * 3.0, "out");
    test::expect_near_all(dx, dx_ref, 0, 1e-4, "dx");
    test::expect_near_all(dw, dw_ref, 0, 64 * N * kEps32, "dweight");
  }
}

// The bf16-input backward widens each row exactly, so it equals the fp32
// kernel on the widened codes bit for bit; dx may be absent.
TEST(RmsNorm, BackwardBf16InputMatchesWidenedFp32) {
  const int64_t N = 300, C = 192;
  const auto x = random_floats(N * C, 61, -3.0f, 3.0f), g = random_floats(N * C, 62);
  const auto w = random_floats(C, 63, 0.5f, 1.5f);
  std::vector<uint16_t> x16(N * C);
  f32_to_bf16(x16.data(), x.data(), N * C);
  std::vector<float> wide(N * C), y(N * C), r(N);
  for (int64_t i = 0; i < N * C; ++i) wide[i] = test::round_to_bf16(x[i]);
  rmsnorm_forward(y.data(), r.data(), wide.data(), w.data(), 1.0f, N, C, kEpsNorm);
  std::vector<float> dx1(N * C, 0.5f), dx2(N * C, 0.5f), dw1(C, 0.0f), dw2(C, 0.0f), dw3(C, 0.0f);
  rmsnorm_backward(dx1.data(), dw1.data(), g.data(), wide.data(), w.data(), r.data(), 2.0f, 0.5f, N, C);
  rmsnorm_backward_bf16x(dx2.data(), dw2.data(), g.data(), x16.data(), w.data(), r.data(), 2.0f, 0.5f, N, C);
  rmsnorm_backward_bf16x(nullptr, dw3.data(), g.data(), x16.data(), w.data(), r.data(), 2.0f, 0.5f, N, C);
  for (int64_t i = 0; i < N * C; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(dx1[i]), std::bit_cast<uint32_t>(dx2[i])) << i;
  for (int64_t j = 0; j < C; ++j) {
    ASSERT_EQ(std::bit_cast<uint32_t>(dw1[j]), std::bit_cast<uint32_t>(dw2[j])) << j;
    ASSERT_EQ(std::bit_cast<uint32_t>(dw1[j]), std::bit_cast<uint32_t>(dw3[j])) << j;
  }
  EXPECT_NE(dw2[0], 0.0f);
}

}  // namespace
}  // namespace mantissa::kernels
