// Cast-on-forward / cast-on-backward in the autograd engine, at propagated
// and dynamic (max / L1 / L2, one pass only) scales, against an independent
// rounding through the scalar reference (formats/round.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/scalify/scalify.hpp"

using namespace mantissa;
using namespace mantissa::scalify;
namespace ag = mantissa::autograd;

namespace {

Tensor randn(int64_t n, double sd, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& e : v) e = static_cast<float>(nd(rng));
  return Tensor::from(v, {n});
}

// round(v / s) in fmt (saturating, nearest-even) x s, via the scalar reference.
float ref_cast(float v, DType fmt, double s) {
  const auto& f = formats::preset(dtype_format_name(fmt));
  formats::RoundOptions o;
  o.saturate = true;
  return static_cast<float>(formats::decode(f, formats::encode(f, static_cast<double>(v) / s, o)) * s);
}

TEST(ScalifyOps, CastOnForwardRoundsValuesAndPassesGradientsStraightThrough) {
  const Tensor xv = randn(500, 1e-3, 1), gv = randn(500, 1.0, 2);
  ag::Tape t;
  ag::Var x = t.leaf(xv);
  CastSpec spec;
  spec.format = DType::e4m3fn;
  spec.scale = 0x1p-10f;  // a propagated scale: data ~ 1
  ag::Var y = cast_on_forward(t, x, spec);
  for (int64_t i = 0; i < 500; ++i) ASSERT_EQ(y.value.f32()[i], ref_cast(xv.f32()[i], DType::e4m3fn, 0x1p-10)) << i;
  t.backward(y, gv);
  for (int64_t i = 0; i < 500; ++i) ASSERT_EQ(x.node->grad.f32()[i], gv.f32()[i]);
  // Without the scale, most of these values would underflow e4m3fn (min subnormal 2^-9).
  spec.scale = 1.0f;
  ag::Tape t2;
  const Tensor unscaled = cast_on_forward(t2, t2.constant(xv), spec).value;
  int zeros = 0;
  for (int64_t i = 0; i < 500; ++i) zeros += unscaled.f32()[i] == 0.0f;
  EXPECT_GT(zeros, 250);
}

TEST(ScalifyOps, CastOnBackwardRescalesGradientsDynamicallyOnThatPassOnly) {
  const Tensor xv = randn(300, 1.0, 3), gv = randn(300, 1e-6, 4);
  for (Norm norm : {Norm::max, Norm::l1, Norm::l2}) {
    RescaleCounter counter;
    ag::Tape t;
    ag::Var x = t.leaf(xv);
    CastSpec spec;
    spec.format = DType::e5m2;
    spec.dynamic = true;
    spec.norm = norm;
    ag::Var y = cast_on_backward(t, x, spec, &counter, "layer0.ln_1.backward");
    EXPECT_TRUE(y.value.same_storage(xv));  // forward untouched
    EXPECT_EQ(counter.total(), 0);          // no rescale on the forward pass
    t.backward(y, gv);
    EXPECT_EQ(counter.counts().at("layer0.ln_1.backward"), 1);
    // Independent scale: 2^floor(log2 norm(g)).
    double acc = 0;
    for (int64_t i = 0; i < 300; ++i) {
      const double a = std::fabs(gv.f32()[i]);
      acc = norm == Norm::max ? std::max(acc, a) : acc + (norm == Norm::l1 ? a : a * a);
    }
    if (norm == Norm::l1) acc /= 300;
    if (norm == Norm::l2) acc = std::sqrt(acc / 300);
    const double s = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(acc))));
    EXPECT_EQ(dynamic_scale(gv, spec), static_cast<float>(s)) << norm_name(norm);
    for (int64_t i = 0; i < 300; ++i) ASSERT_EQ(x.node->grad.f32()[i], ref_cast(gv.f32()[i], DType::e5m2, s)) << i;
  }
}

TEST(ScalifyOps, ZeroGradientsAndBadScales) {
  CastSpec spec;
  spec.dynamic = true;
  EXPECT_EQ(dynamic_scale(Tensor::zeros({10}), spec), 1.0f);  // any scale
  spec.floor = 0x1p-14f;
  EXPECT_EQ(dynamic_scale(randn(10, 1e-9, 5), spec), 0x1p-14f);
  EXPECT_THROW(cast_values(Tensor::zeros({3}), spec, 3.0f), std::invalid_argument);
  // Saturating: a too-small scale clamps to +-max instead of producing inf/NaN.
  spec.format = DType::e4m3fn;
  const Tensor big = Tensor::from({1e6f, -1e6f}, {2});
  const Tensor c = cast_values(big, spec, 1.0f);
  EXPECT_EQ(c.f32()[0], 448.0f);
  EXPECT_EQ(c.f32()[1], -448.0f);
}

}  // namespace
