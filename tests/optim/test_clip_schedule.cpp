// Gradient-norm clipping against a float64 norm computed here, and the
// learning-rate schedule at its key steps (nanoGPT's get_lr by hand).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "mantissa/optim/clip.hpp"
#include "mantissa/optim/schedule.hpp"

using mantissa::Tensor;
using mantissa::autograd::Parameter;
namespace optim = mantissa::optim;

namespace {
struct Grads {
  std::vector<Parameter> ps;
  Grads() {
    for (int64_t n : {20000, 3, 1}) {
      Parameter p;
      p.name = std::string("p").append(std::to_string(n));  // (GCC 12 -Wrestrict false positive on "lit" + string)
      p.value = Tensor::zeros({n});
      p.grad = Tensor::zeros({n});
      for (int64_t i = 0; i < n; ++i) p.grad.f32()[i] = static_cast<float>(std::cos(0.1 * static_cast<double>(i * n)) * (n == 1 ? 3.0 : 0.01));
      ps.push_back(std::move(p));
    }
  }
  std::vector<Parameter*> ptrs() {
    std::vector<Parameter*> out;
    for (auto& p : ps) out.push_back(&p);
    return out;
  }
  double norm64() const {
    double s = 0;
    for (const auto& p : ps)
      for (int64_t i = 0; i < p.grad.numel(); ++i) s += static_cast<double>(p.grad.f32()[i]) * p.grad.f32()[i];
    return std::sqrt(s);
  }
};
}  // namespace

// The optimizer step's fused pass: the sum of squares of the grads before
// scaling (float64), every grad multiplied by the factor; a grad whose float
// square overflows (1e30) still gives a finite sum; inf and NaN do not.
TEST(Clip, ScaleGradsSumsqMeasuresBeforeScaling) {
  Grads g;
  const double want = g.norm64();
  std::vector<float> before = g.ps[0].grad.to_vector();
  const double sumsq = optim::scale_grads_sumsq(g.ptrs(), 0.25f);
  EXPECT_NEAR(std::sqrt(sumsq), want, 1e-12 * want);
  for (size_t i = 0; i < before.size(); ++i) ASSERT_EQ(g.ps[0].grad.f32()[i], before[i] * 0.25f) << i;
  EXPECT_NEAR(g.norm64(), want / 4, 1e-12 * want);
  g.ps[1].grad.f32()[0] = 1e30f;
  const double big = static_cast<double>(1e30f) * static_cast<double>(1e30f);
  EXPECT_NEAR(optim::scale_grads_sumsq(g.ptrs(), 1.0f), big, 1e-12 * big);
  g.ps[1].grad.f32()[1] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(optim::scale_grads_sumsq(g.ptrs(), 1.0f)));
  g.ps[1].grad.f32()[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(optim::scale_grads_sumsq(g.ptrs(), 1.0f)));
}

TEST(Clip, NormMatchesFloat64AndClipsToMax) {
  Grads g;
  const double want = g.norm64();
  EXPECT_NEAR(optim::grad_norm(g.ptrs()), want, 1e-12 * want);
  std::vector<float> before(g.ps[0].grad.f32(), g.ps[0].grad.f32() + 20000);
  const double got = optim::clip_grad_norm(g.ptrs(), 1.0);
  EXPECT_NEAR(got, want, 1e-12 * want);
  ASSERT_GT(want, 1.0);
  const double coef = 1.0 / (want + 1e-6);
  EXPECT_NEAR(g.norm64(), want * coef, 1e-6);
  for (int i = 0; i < 20000; i += 997) EXPECT_FLOAT_EQ(g.ps[0].grad.f32()[i], static_cast<float>(before[static_cast<size_t>(i)] * coef));
}

TEST(Clip, BelowMaxIsUntouched) {
  Grads g;
  const double want = g.norm64();
  const float first = g.ps[2].grad.f32()[0];
  EXPECT_NEAR(optim::clip_grad_norm(g.ptrs(), want * 2), want, 1e-12 * want);
  EXPECT_EQ(g.ps[2].grad.f32()[0], first);
  EXPECT_NEAR(optim::clip_grad_norm(g.ptrs(), 0.0), want, 1e-12 * want);  // measure only
  EXPECT_EQ(g.ps[2].grad.f32()[0], first);
}

TEST(Clip, NonFiniteNormLeavesGradsAlone) {
  Grads g;
  g.ps[0].grad.f32()[12345] = std::numeric_limits<float>::infinity();
  const float keep = g.ps[2].grad.f32()[0];
  EXPECT_TRUE(std::isinf(optim::clip_grad_norm(g.ptrs(), 1.0)));
  EXPECT_EQ(g.ps[2].grad.f32()[0], keep);
  g.ps[1].grad.f32()[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(optim::clip_grad_norm(g.ptrs(), 1.0)));
  EXPECT_EQ(g.ps[2].grad.f32()[0], keep);
}

TEST(Clip, ScaleGrads) {
  Grads g;
  const double before = g.norm64();
  optim::scale_grads(g.ptrs(), 0.25f);
  EXPECT_NEAR(g.norm64(), before * 0.25, 1e-12 * before);
}

TEST(Schedule, KeyStepsOfWarmupAndCosine) {
  optim::LrSchedule s{1.0, 0.1, 10, 100};
  s.validate();
  EXPECT_DOUBLE_EQ(s.at(0), 1.0 / 11);
  EXPECT_DOUBLE_EQ(s.at(9), 10.0 / 11);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(55), 0.55, 1e-15);  // half way: cos(pi/2) = 0
  EXPECT_NEAR(s.at(25), 0.1 + 0.45 * (1 + std::cos(std::numbers::pi / 6)), 1e-15);
  EXPECT_NEAR(s.at(100), 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(s.at(101), 0.1);
  EXPECT_DOUBLE_EQ(s.at(100000), 0.1);
  for (int64_t t = 11; t <= 100; ++t) EXPECT_LE(s.at(t), s.at(t - 1));
}

TEST(Schedule, ConstantAndInvalid) {
  optim::LrSchedule c{0.5, 0.5, 0, 0};
  EXPECT_DOUBLE_EQ(c.at(0), 0.5);
  EXPECT_DOUBLE_EQ(c.at(1000), 0.5);
  optim::LrSchedule bad{1.0, 2.0, 0, 10};
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  optim::LrSchedule neg{1.0, 0.0, -1, 10};
  EXPECT_THROW(neg.validate(), std::invalid_argument);
  optim::LrSchedule nan{std::nan(""), 0.0, 0, 10};
  EXPECT_THROW(nan.validate(), std::invalid_argument);
}
