// Elementwise kernels, activations, dropout, reductions and bf16 conversion
// against float64 recomputation. Sizes above the threading threshold so the
// OpenMP paths run.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/reference.hpp"
#include "kernels/row_math.hpp"
#include "kernels/vec_math.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace mantissa::kernels {
namespace {

using test::gelu_grad_ref;
using test::gelu_ref;
using test::kEps32;
using test::random_floats;

constexpr int64_t kN = 100003;  // odd, above the parallel threshold

// a op b for fp32 inputs is correctly rounded, so it equals the double result
// rounded to float exactly (the double result of + and * of two floats is exact).
TEST(Elementwise, ArithmeticIsCorrectlyRounded) {
  auto a = random_floats(kN, 1), b = random_floats(kN, 2, -3.0f, 3.0f);
  std::vector<float> out(kN);
  add(out.data(), a.data(), b.data(), kN);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(out[i], static_cast<float>(double(a[i]) + double(b[i]))) << i;
  mul(out.data(), a.data(), b.data(), kN);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(out[i], static_cast<float>(double(a[i]) * double(b[i]))) << i;
  scale(out.data(), a.data(), 0.3f, kN);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(out[i], static_cast<float>(0.3f * double(a[i]))) << i;
  std::vector<float> acc = b;
  add_inplace(acc.data(), a.data(), kN);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(acc[i], static_cast<float>(double(a[i]) + double(b[i]))) << i;
  // axpy rounds twice (product, then sum) unless contracted to an fma: within 1.5 ulp.
  acc = b;
  axpy(acc.data(), a.data(), -1.7f, kN);
  for (int64_t i = 0; i < kN; ++i) {
    const double want = double(b[i]) + double(-1.7f) * double(a[i]);
    ASSERT_NEAR(acc[i], want, 2.0 * kEps32 * (std::abs(want) + std::abs(1.7 * a[i]))) << i;
  }
}

TEST(Gelu, ForwardMatchesGpt2FormulaInFloat64) {
  auto x = random_floats(kN, 3, -6.0f, 6.0f);
  std::vector<float> y(kN);
  gelu_forward(y.data(), x.data(), kN);
  std::vector<double> want(kN);
  for (int64_t i = 0; i < kN; ++i) want[i] = gelu_ref(x[i]);
  // A handful of fp32 roundings in u and tanh: relative few ulp, plus an absolute
  // term for the cancellation 1 + tanh(u) near -1 (large negative x).
  test::expect_near_all(y, want, 8 * kEps32, 2e-7, "gelu");
}

TEST(Gelu, BackwardMatchesAnalyticAndFiniteDifferences) {
  auto x = random_floats(kN, 4, -6.0f, 6.0f);
  auto g = random_floats(kN, 5);
  std::vector<float> dx(kN, 0.25f);
  gelu_backward(dx.data(), x.data(), g.data(), kN);
  std::vector<double> want(kN);
  for (int64_t i = 0; i < kN; ++i) want[i] = 0.25 + gelu_grad_ref(x[i]) * g[i];
  test::expect_near_all(dx, want, 16 * kEps32, 1e-6, "gelu backward");
  // Central differences of the float64 forward (h = 1e-5: error ~ h^2 f''' ~ 1e-10).
  for (int64_t i = 0; i < 2000; ++i) {
    const double h = 1e-5, xi = x[i];
    const double fd = (gelu_ref(xi + h) - gelu_ref(xi - h)) / (2 * h) * g[i] + 0.25;
    ASSERT_NEAR(dx[i], fd, 1e-6) << "x=" << xi;
  }
}

// Far left of zero exp(-2u) overflows; the derivative must go to its ~0
// limit, not to inf * 0 = NaN (found in a unit-scaled GPT whose MLP
// pre-activations reached -11 during training).
TEST(Gelu, BackwardIsFiniteFarLeftOfZero) {
  const std::vector<float> x = {-200.0f, -40.0f, -12.0f, -10.2f, -10.0f, -9.0f, -3.0f, 0.0f, 4.0f, 30.0f};
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<float> g(x.size(), 1.0f);
  std::vector<float> dx(x.size(), 0.0f);
  gelu_backward(dx.data(), x.data(), g.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(dx[i])) << "x=" << x[i];
    EXPECT_NEAR(dx[i], gelu_grad_ref(x[i]), 1e-6 + 1e-5 * std::fabs(gelu_grad_ref(x[i]))) << "x=" << x[i];
  }
}

// Backward of out = alpha g sigmoid(g) u against float64 (sigmoid through vexp: a few
// ulp), accumulating into nonzero gradients; both outputs at once give the bits each
// gives alone.
TEST(Swiglu, BackwardMatchesFloat64AndEachOutputAlone) {
  const auto g = random_floats(kN, 1, -8.0f, 8.0f), u = random_floats(kN, 2), dy = random_floats(kN, 3);
  const auto dg0 = random_floats(kN, 4), du0 = random_floats(kN, 5);
  const float alpha = 1.5f, beta = 0.25f;
  std::vector<float> dg = dg0, du = du0, dg_alone = dg0, du_alone = du0;
  swiglu_backward(dg.data(), du.data(), g.data(), u.data(), dy.data(), kN, alpha, beta);
  swiglu_backward(dg_alone.data(), nullptr, g.data(), u.data(), dy.data(), kN, alpha, beta);
  swiglu_backward(nullptr, du_alone.data(), g.data(), u.data(), dy.data(), kN, alpha, beta);
  double worst_g = 0, worst_u = 0;
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(dg[i], dg_alone[i]) << i;
    ASSERT_EQ(du[i], du_alone[i]) << i;
    const double x = g[i], s = 1.0 / (1.0 + std::exp(-x));
    const double want_u = du0[i] + alpha * x * s * dy[i];
    const double want_g = dg0[i] + beta * s * (1.0 + x * (1.0 - s)) * u[i] * dy[i];
    worst_u = std::max(worst_u, std::abs(du[i] - want_u) / std::max(1.0, std::abs(want_u)));
    worst_g = std::max(worst_g, std::abs(dg[i] - want_g) / std::max(1.0, std::abs(want_g)));
  }
  EXPECT_LT(worst_u, 16 * kEps32);
  EXPECT_LT(worst_g, 16 * kEps32);
}

// gate and up read as bf16 codes give the bits of the fp32 kernel on the widened
// codes (odd length: block and vector tails).
TEST(Swiglu, BackwardBf16InputsMatchWidenedFp32) {
  const int64_t n = kN - 3;
  const auto g = random_floats(n, 11, -8.0f, 8.0f), u = random_floats(n, 12), dy = random_floats(n, 13);
  std::vector<uint16_t> g16(n), u16(n);
  f32_to_bf16(g16.data(), g.data(), n);
  f32_to_bf16(u16.data(), u.data(), n);
  std::vector<float> gw(n), uw(n);
  for (int64_t i = 0; i < n; ++i) {
    gw[i] = test::round_to_bf16(g[i]);
    uw[i] = test::round_to_bf16(u[i]);
  }
  std::vector<float> dg1(n, 0.5f), du1(n, -0.5f), dg2 = dg1, du2 = du1;
  swiglu_backward(dg1.data(), du1.data(), gw.data(), uw.data(), dy.data(), n, 1.5f, 0.25f);
  swiglu_backward_bf16x(dg2.data(), du2.data(), g16.data(), u16.data(), dy.data(), n, 1.5f, 0.25f);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(dg1[i]), std::bit_cast<uint32_t>(dg2[i])) << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(du1[i]), std::bit_cast<uint32_t>(du2[i])) << i;
  }
  EXPECT_NE(dg2[0], 0.5f);
}

TEST(Relu, ForwardAndBackward) {
  auto x = random_floats(kN, 6);
  x[0] = 0.0f;
  auto g = random_floats(kN, 7);
  std::vector<float> y(kN), dx(kN, 1.0f);
  relu_forward(y.data(), x.data(), kN);
  relu_backward(dx.data(), x.data(), g.data(), kN);
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(y[i], x[i] > 0 ? x[i] : 0.0f);
    ASSERT_EQ(dx[i], x[i] > 0 ? static_cast<float>(1.0 + g[i]) : 1.0f);
  }
}

TEST(Dropout, KeepsFractionScalesAndBackwardUsesSameMask) {
  const float p = 0.3f;
  auto x = random_floats(kN, 8);
  auto g = random_floats(kN, 9);
  std::vector<float> y(kN), dx(kN, 0.0f);
  dropout_forward(y.data(), x.data(), p, 42, 7, kN);
  dropout_backward(dx.data(), g.data(), p, 42, 7, kN);
  const float s = 1.0f / (1.0f - p);
  int64_t kept = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const bool k = dropout_kept(p, 42, 7, i);
    kept += k;
    ASSERT_EQ(y[i], k ? x[i] * s : 0.0f) << i;
    ASSERT_EQ(dx[i], k ? g[i] * s : 0.0f) << i;
  }
  // Binomial(n, 0.7): mean 70002, sd 145; 6 sd bound.
  EXPECT_NEAR(static_cast<double>(kept), 0.7 * kN, 6 * std::sqrt(kN * 0.21));
  // Different offset: a different mask (agreement ~ 0.58 of elements, not all).
  int64_t same = 0;
  for (int64_t i = 0; i < kN; ++i) same += dropout_kept(p, 42, 7, i) == dropout_kept(p, 42, 8, i);
  EXPECT_LT(same, kN * 0.62);
}

TEST(Dropout, IndependentOfThreadCountAndEdgeProbabilities) {
  auto x = random_floats(kN, 10);
  std::vector<float> y1(kN), y2(kN);
  const int saved = num_threads();
  set_num_threads(1);
  dropout_forward(y1.data(), x.data(), 0.5f, 3, 1, kN);
  set_num_threads(2);
  dropout_forward(y2.data(), x.data(), 0.5f, 3, 1, kN);
  set_num_threads(saved);
  EXPECT_EQ(y1, y2);
  dropout_forward(y1.data(), x.data(), 0.0f, 3, 1, kN);
  EXPECT_EQ(y1, x);
  dropout_forward(y1.data(), x.data(), 1.0f, 3, 1, kN);
  EXPECT_EQ(y1, std::vector<float>(kN, 0.0f));
  EXPECT_THROW(dropout_forward(y1.data(), x.data(), 1.5f, 3, 1, kN), std::invalid_argument);
  EXPECT_THROW(dropout_forward(y1.data(), x.data(), std::nanf(""), 3, 1, kN), std::invalid_argument);
}

TEST(Reductions, SumsInFloat64AndFiniteCheck) {
  auto x = random_floats(kN, 11, -100.0f, 100.0f);
  double s = 0, ss = 0;
  for (float v : x) {
    s += v;
    ss += double(v) * v;
  }
  // Only the summation order differs: n u_64 sum|x| is far below 1e-9 relative.
  EXPECT_NEAR(sum(x.data(), kN), s, 1e-9 * ss);
  EXPECT_NEAR(sum_squares(x.data(), kN), ss, 1e-12 * ss);
  EXPECT_EQ(sum(x.data(), 0), 0.0);
  EXPECT_TRUE(all_finite(x.data(), kN));
  for (int64_t pos : {int64_t{0}, int64_t{50000}, kN - 1}) {
    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      auto y = x;
      y[static_cast<size_t>(pos)] = bad;
      EXPECT_FALSE(all_finite(y.data(), kN)) << pos << " " << bad;
    }
  }
  const float big = std::numeric_limits<float>::max();
  EXPECT_TRUE(all_finite(&big, 1));
}

TEST(Bf16, RoundsToNearestEvenLikeTheReference) {
  auto x = random_floats(kN, 12, -1e4f, 1e4f);
  // Ties, overflow, subnormals, NaN, infinities.
  x[0] = std::bit_cast<float>(0x3f808000u);  // tie, even below -> down
  x[1] = std::bit_cast<float>(0x3f818000u);  // tie, odd below -> up
  x[2] = std::numeric_limits<float>::max();  // rounds to inf
  x[3] = std::bit_cast<float>(0x00000001u);  // smallest subnormal -> 0
  x[4] = -std::numeric_limits<float>::infinity();
  x[5] = std::bit_cast<float>(0x7f7f7fffu);  // just below the overflow threshold
  std::vector<uint16_t> b(kN);
  std::vector<float> back(kN);
  f32_to_bf16(b.data(), x.data(), kN);
  bf16_to_f32(back.data(), b.data(), kN);
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(test::round_to_bf16(x[i])))
        << i << " x=" << x[i];
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint16_t nb;
  f32_to_bf16(&nb, &nan, 1);
  float nback;
  bf16_to_f32(&nback, &nb, 1);
  EXPECT_TRUE(std::isnan(nback));
}

// GELU backward inputs: x, its bf16 codes and dout; an odd length (partial
// blocks) above the threading threshold.
struct GeluCase {
  static constexpr int64_t n = 70001;
  std::vector<float> x, g;
  std::vector<uint16_t> x16;
  GeluCase(uint64_t seed, float lo) : x(random_floats(n, seed, lo, 6.0f)), g(random_floats(n, seed + 1)), x16(n) {
    f32_to_bf16(x16.data(), x.data(), n);
  }
};

// GELU backward reading x as bf16 codes equals the fp32 kernel on the widened
// codes, bit for bit.
TEST(GeluBackward, Bf16InputMatchesWidenedFp32) {
  const GeluCase c(31, -6.0f);
  const int64_t n = c.n;
  const auto& x = c.x;
  const auto& g = c.g;
  const auto& x16 = c.x16;
  std::vector<float> wide(n), d_ref(n, 0.25f), d16(n, 0.25f);
  for (int64_t i = 0; i < n; ++i) wide[i] = test::round_to_bf16(x[i]);
  gelu_backward(d_ref.data(), wide.data(), g.data(), n);
  gelu_backward_bf16x(d16.data(), x16.data(), g.data(), n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(d_ref[i]), std::bit_cast<uint32_t>(d16[i])) << i;
  EXPECT_NE(d16[n / 2], 0.25f);  // something was added
}

// The overwriting variants (autograd computes the GELU gradient in place of
// the output's) give the bits of += into zeros, also with dx == dout.
TEST(GeluBackward, IntoOverwritesWithTheBitsOfAddingToZero) {
  const GeluCase c(33, -12.0f);  // below -10 the slope is 0: +0 or -0
  const int64_t n = c.n;
  const auto& x = c.x;
  const auto& g = c.g;
  const auto& x16 = c.x16;
  std::vector<float> ref(n, 0.0f), ref16(n, 0.0f);
  gelu_backward(ref.data(), x.data(), g.data(), n);
  gelu_backward_bf16x(ref16.data(), x16.data(), g.data(), n);
  std::vector<float> into(n, 7.0f), in_place = g, in_place16 = g;
  gelu_backward_into(into.data(), x.data(), g.data(), n);
  gelu_backward_into(in_place.data(), x.data(), in_place.data(), n);
  gelu_backward_bf16x_into(in_place16.data(), x16.data(), in_place16.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(into[i]), std::bit_cast<uint32_t>(ref[i])) << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(in_place[i]), std::bit_cast<uint32_t>(ref[i])) << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(in_place16[i]), std::bit_cast<uint32_t>(ref16[i])) << i;
  }
}

// GELU backward reading x as 1-byte codes (FP8 saved activations) equals the
// fp32 kernel on the decoded values (code value x fold), bit for bit, added
// or overwriting, across the threaded split.
TEST(GeluBackward, CodesInputMatchesDecodedFp32) {
  const formats::Format& f = formats::preset("e4m3fn");
  formats::Table16 table{};
  for (uint32_t c = 0; c < 256; ++c)
    table[c] = static_cast<uint16_t>(std::bit_cast<uint32_t>(formats::decode_f32(f, c)) >> 16);
  const int64_t n = 70000;  // past the threading threshold, not a multiple of the block
  std::vector<uint8_t> codes(n);
  std::vector<float> g(n), decoded(n);
  const float fold = 0.125f;
  for (int64_t i = 0; i < n; ++i) {
    codes[i] = static_cast<uint8_t>((i * 37) % 256 == 0x7F || (i * 37) % 256 == 0xFF ? 0 : (i * 37) % 256);  // no NaN
    decoded[i] = static_cast<float>(formats::decode_f32(f, codes[i])) * fold;
    g[i] = std::sin(0.001f * static_cast<float>(i));
  }
  for (bool accumulate : {true, false}) {
    std::vector<float> ref(n, accumulate ? 0.5f : 0.0f), got(n, 0.5f);
    gelu_backward(ref.data(), decoded.data(), g.data(), n, 0.75f);
    gelu_backward_codes(got.data(), codes.data(), table, fold, g.data(), n, accumulate, 0.75f);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(ref[i])) << i << (accumulate ? " +=" : " =");
  }
}

// The exp-based spans under every tier with its own path (scalar and
// AVX-512: the compiler's clones; avx2: row_math_avx2.cpp). On the avx2 tier
// every exp and SwiGLU value has the bits of the scalar expressions (vexp,
// vsigmoid) evaluated here, built without FMA, on every tail length and at
// vexp's range edges, NaN and infinities; the clones agree to a few ulps
// (the AVX-512 clone contracts multiply-adds into FMAs). The sums are
// within fp32 summation error of float64.
struct CapScope {
  explicit CapScope(cpu::Isa isa) : before(cpu::max_isa()) { cpu::set_max_isa(isa); }
  ~CapScope() { cpu::set_max_isa(before); }
  cpu::Isa before;
};

std::vector<float> exp_inputs(int64_t n, uint32_t seed) {
  auto x = random_floats(static_cast<size_t>(n), seed, -100.0f, 100.0f);
  const float edge[] = {-87.0f, std::nextafter(-87.0f, -100.0f), std::nextafter(-87.0f, 0.0f), 88.0f,
                        std::nextafter(88.0f, 100.0f), std::nextafter(88.0f, 0.0f), 0.0f, -0.0f, 1e-42f, 3e38f, -3e38f,
                        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()};
  for (int64_t i = 0; i < n; i += 3) x[static_cast<size_t>(i)] = edge[(i / 3) % std::size(edge)];
  return x;
}

bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (a != a && b != b); }

// Bit-equal, or (exact = false) within 8 ulps of the larger magnitude plus
// `terms` (the size of the terms summed into it) and 1e-30 (results near
// the subnormals).
bool agrees(float got, float want, bool exact, double terms = 0.0) {
  if (same_bits(got, want) || exact) return same_bits(got, want);
  if (!std::isfinite(got) || !std::isfinite(want)) return false;
  const double big = std::max(std::abs(double(got)), std::abs(double(want)));
  return std::abs(double(got) - want) <= 8 * kEps32 * (big + terms) + 1e-30;
}

TEST(ExpSpans, EveryTierGivesTheScalarBits) {
  for (cpu::Isa isa : {cpu::Isa::scalar, cpu::Isa::avx2, cpu::Isa::avx512}) {
    if (isa > cpu::detected_isa()) continue;
    CapScope cap(isa);
    const char* where = cpu::isa_name(isa);
    const bool exact = isa == cpu::Isa::avx2;
    for (int64_t n : {1, 3, 7, 8, 9, 15, 16, 17, 31, 100, 1001}) {
      const auto x = exp_inputs(n, static_cast<uint32_t>(n));
      auto g = random_floats(static_cast<size_t>(n), 7, -12.0f, 12.0f);
      for (int64_t i = 0; i < n; i += 5) g[static_cast<size_t>(i)] = x[static_cast<size_t>(i)];
      const auto u = random_floats(static_cast<size_t>(n), 8), dy = random_floats(static_cast<size_t>(n), 9);
      // Sums over finite inputs only (shift 1.5: values up to e^86.5).
      std::vector<float> xf(x);
      for (auto& v : xf) v = std::isfinite(v) && std::abs(v) < 80.0f ? v : 0.5f;
      std::vector<float> y(static_cast<size_t>(n));
      const float s = span_exp_sum(y.data(), xf.data(), n, 1.5f);
      double want = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(agrees(y[i], vexp(xf[i] - 1.5f), exact)) << where << " n=" << n << " x=" << xf[i];
        want += y[i];
      }
      EXPECT_NEAR(s, want, n * kEps32 * want) << where;
      EXPECT_NEAR(span_sum_exp(xf.data(), n, 1.5f), want, n * kEps32 * want) << where;
      // exp of every edge input, in place (y may alias x).
      std::vector<float> e(x);
      span_exp_sum(e.data(), e.data(), n, 0.0f);
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(agrees(e[i], vexp(x[i]), exact)) << where << " x=" << x[i];
      // SwiGLU forward and backward: both outputs, and each alone.
      std::vector<float> out(static_cast<size_t>(n)), dg(static_cast<size_t>(n), 0.25f), du(dg), dg1(dg), du1(dg);
      span_swiglu_forward(out.data(), g.data(), u.data(), n, 0.75f);
      span_swiglu_backward(dg.data(), du.data(), g.data(), u.data(), dy.data(), n, 0.75f, 1.25f);
      span_swiglu_backward(dg1.data(), nullptr, g.data(), u.data(), dy.data(), n, 0.75f, 1.25f);
      span_swiglu_backward(nullptr, du1.data(), g.data(), u.data(), dy.data(), n, 0.75f, 1.25f);
      for (int64_t i = 0; i < n; ++i) {
        const float sg = vsigmoid(g[i]);
        const float f = 0.75f * g[i] * sg * u[i];
        const float wdu = 0.25f + 0.75f * g[i] * sg * dy[i];
        const float wdg = 0.25f + 1.25f * sg * (1.0f + g[i] * (1.0f - sg)) * u[i] * dy[i];
        ASSERT_TRUE(agrees(out[i], f, exact)) << where << " g=" << g[i] << ": " << out[i] << " vs " << f;
        const double tu = std::abs(wdu - 0.25) + 0.25, tg = std::abs(wdg - 0.25) + 0.25;
        ASSERT_TRUE(agrees(du[i], wdu, exact, tu) && agrees(du1[i], wdu, exact, tu)) << where << " g=" << g[i];
        ASSERT_TRUE(agrees(dg[i], wdg, exact, tg) && agrees(dg1[i], wdg, exact, tg)) << where << " g=" << g[i];
      }
    }
  }
}

TEST(Threads, SetAndGet) {
  const int saved = num_threads();
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
  EXPECT_THROW(set_num_threads(0), std::invalid_argument);
  set_num_threads(saved);
}

}  // namespace
}  // namespace mantissa::kernels
