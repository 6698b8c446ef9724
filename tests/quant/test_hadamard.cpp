// The 16-point RHT (quant/hadamard.hpp) against a dense float64 product
// with Q = H D built from the Sylvester definition H[i][j] = (-1)^popcount(i & j) / 4,
// and the invariance of the product x^T y that the Wgrad cast relies on;
// each instruction set's path against the scalar one bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/hadamard16.hpp"
#include "mantissa/quant/hadamard.hpp"

namespace ms = mantissa::quant;

namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(g);
  return x;
}

// Q x for every 16-row group of x [rows, cols], in float64.
std::vector<double> dense(const std::vector<float>& x, int64_t rows, int64_t cols, const ms::RhtSigns& s) {
  std::vector<double> y(x.begin(), x.end());
  for (int64_t g = 0; g + 16 <= rows; g += 16)
    for (int64_t j = 0; j < cols; ++j)
      for (int i = 0; i < 16; ++i) {
        double acc = 0;
        for (int k = 0; k < 16; ++k)
          acc += (std::popcount(static_cast<unsigned>(i & k)) % 2 ? -0.25 : 0.25) * s[k] * x[(g + k) * cols + j];
        y[(g + i) * cols + j] = acc;
      }
  return y;
}

}  // namespace

TEST(Hadamard, MatchesTheDenseTransform) {
  const int64_t rows = 70, cols = 37;  // a last group of 6 rows stays as it is
  for (bool random : {true, false}) {
    const ms::RhtSigns s = ms::rht_signs(11, random);
    std::vector<float> x = randn(rows * cols, 1);
    const std::vector<double> want = dense(x, rows, cols, s);
    const std::vector<float> orig = x;
    std::vector<float> out(x.size(), NAN);
    ms::rht_rows(x.data(), out.data(), rows, cols, s);  // out of place: the same bits
    ms::rht_rows(x.data(), rows, cols, s);
    EXPECT_EQ(0, std::memcmp(out.data(), x.data(), x.size() * sizeof(float)));
    for (int64_t i = 0; i < rows * cols; ++i) ASSERT_NEAR(x[i], want[i], 1e-6 * (1 + std::fabs(want[i]))) << i;
    for (int64_t i = 64 * cols; i < rows * cols; ++i) ASSERT_EQ(x[i], orig[i]);
  }
}

TEST(Hadamard, SignsAreSeededAndDeterministicVariantIsPlain) {
  const ms::RhtSigns a = ms::rht_signs(1), b = ms::rht_signs(1), c = ms::rht_signs(2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int minus = 0;
  for (float v : a) {
    EXPECT_TRUE(v == 1.0f || v == -1.0f);
    minus += v < 0;
  }
  EXPECT_GT(minus, 0);
  for (float v : ms::rht_signs(1, false)) EXPECT_EQ(v, 1.0f);
}

// (Q x)^T (Q y) = x^T y: the Wgrad product is unchanged up to rounding, and
// the transform is its own inverse up to the signs (Q^T Q = I).
TEST(Hadamard, PreservesTheWgradProduct) {
  const int64_t M = 64, K = 5, N = 7;
  const ms::RhtSigns s = ms::rht_signs(3);
  std::vector<float> x = randn(M * K, 4), y = randn(M * N, 5);
  std::vector<double> want(K * N, 0.0), got(K * N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) want[k * N + n] += double(x[m * K + k]) * y[m * N + n];
  ms::rht_rows(x.data(), M, K, s);
  ms::rht_rows(y.data(), M, N, s);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) got[k * N + n] += double(x[m * K + k]) * y[m * N + n];
  for (int64_t i = 0; i < K * N; ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
}

// Along columns: every 16 consecutive values of a row, Q applied to them (the
// dense transform of the transpose), a last shorter group unchanged, the
// same bits in place and out of place; and x Q^T (y Q^T)^T = x y^T, the
// invariance of a dgrad product rotated along its contraction.
TEST(Hadamard, AlongColumnsMatchesTheDenseTransform) {
  const int64_t rows = 9, cols = 37;
  const ms::RhtSigns s = ms::rht_signs(5);
  const std::vector<float> x = randn(rows * cols, 6);
  std::vector<float> xt(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) xt[j * rows + i] = x[i * cols + j];
  const std::vector<double> want_t = dense(xt, cols, rows, s);
  std::vector<float> out(x.size(), NAN), in_place = x;
  ms::rht_cols(x.data(), out.data(), rows, cols, s);
  ms::rht_cols(in_place.data(), in_place.data(), rows, cols, s);
  EXPECT_EQ(0, std::memcmp(out.data(), in_place.data(), x.size() * sizeof(float)));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      ASSERT_NEAR(out[i * cols + j], want_t[j * rows + i], 1e-6 * (1 + std::fabs(want_t[j * rows + i]))) << i << "," << j;
  const int64_t N = 48, M = 3, K = 4;
  std::vector<float> a = randn(M * N, 7), b = randn(K * N, 8);
  std::vector<double> want(M * K, 0.0), got(M * K, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) want[m * K + k] += double(a[m * N + n]) * b[k * N + n];
  ms::rht_cols(a.data(), a.data(), M, N, s);
  ms::rht_cols(b.data(), b.data(), K, N, s);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) got[m * K + k] += double(a[m * N + n]) * b[k * N + n];
  for (int64_t i = 0; i < M * K; ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
}

// Every instruction-set path (AVX-512, AVX2, scalar, as the host allows)
// gives the scalar path's bits, along both axes, for widths with and without
// partial vectors and groups, in place and out of place.
TEST(Hadamard, EveryIsaPathGivesTheScalarBits) {
  namespace cpu = mantissa::cpu;
  const cpu::Isa before = cpu::max_isa();
  const ms::RhtSigns s = ms::rht_signs(3);
  for (int axis : {1, 2})
    for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{16, 3}, {35, 37}, {48, 8}, {20, 16}, {17, 53}}) {
      std::vector<float> x = randn(static_cast<size_t>(rows * cols), 4);
      x[5] = 3e38f;  // its group overflows to inf
      cpu::set_max_isa(cpu::Isa::scalar);
      std::vector<float> want(x.size(), NAN);
      mantissa::formats::hadamard16(x.data(), want.data(), rows, cols, axis, s.data());
      for (cpu::Isa isa : cpu::kAllIsas) {
        if (isa > cpu::detected_isa()) continue;
        cpu::set_max_isa(isa);
        std::vector<float> out(x.size(), NAN), in_place = x;
        mantissa::formats::hadamard16(x.data(), out.data(), rows, cols, axis, s.data());
        mantissa::formats::hadamard16(in_place.data(), in_place.data(), rows, cols, axis, s.data());
        EXPECT_EQ(0, std::memcmp(out.data(), want.data(), x.size() * sizeof(float)))
            << cpu::isa_name(isa) << " axis " << axis << " " << rows << "x" << cols;
        EXPECT_EQ(0, std::memcmp(in_place.data(), want.data(), x.size() * sizeof(float)))
            << cpu::isa_name(isa) << " axis " << axis << " " << rows << "x" << cols;
      }
    }
  cpu::set_max_isa(before);
}
