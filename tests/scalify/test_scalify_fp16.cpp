// FP16 scale propagation (scalify-fp16, scalify-fp16-master): the fp16 cast
// and its f32 decode against a float64 recomputation of round-to-nearest-even
// binary16; a linear product through the engine against FP64 products of the
// same fp16 operands (exact up to fp32 accumulation order); and the two
// recipes training a tiny GPT to fp32's loss.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "mantissa/amp/amp.hpp"
#include "mantissa/autograd/ops.hpp"
#include "mantissa/nn/gpt.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/scalify/scalify_cast.hpp"
#include "mantissa/scalify/scalify_quantiser.hpp"
#include "autograd/fp64_product.hpp"
#include "random_tensor.hpp"
#include "tiny_gpt.hpp"

using namespace mantissa;

namespace {

// binary16 round-to-nearest-even of y, in float64 (exact: every step is a
// power-of-two multiple or an integer rounding of a double with <= 53 bits).
// Saturating: |y| > 65504 gives +-65504. Independent of the formats module.
double fp16_round(double y) {
  if (std::fabs(y) > 65504.0) return std::copysign(65504.0, y);
  if (y == 0) return y;
  const int e = std::max(static_cast<int>(std::floor(std::log2(std::fabs(y)))), -14);
  const double ulp = std::ldexp(1.0, e - 10);
  return std::nearbyint(y / ulp) * ulp;  // default rounding mode: ties to even
}

// The values a cast at exponent E stands for: fp16_round(x 2^-E) 2^E.
std::vector<float> fp16_dequantised(const Tensor& x, int E) {
  std::vector<float> v(static_cast<size_t>(x.numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(std::ldexp(fp16_round(std::ldexp(static_cast<double>(x.f32()[i]), -E)), E));
  return v;
}

int floor_log2(double v) { return static_cast<int>(std::floor(std::log2(v))); }

TEST(ScalifyFp16Cast, CodesAndDecodeMatchFloat64Rounding) {
  // Log-uniform magnitudes over 2^-45 .. 2^25 (fp16's subnormals, normals and
  // overflow at every exponent below), random signs, plus exact ties and
  // edge cases; several scale exponents.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> lg(-45, 25);
  std::vector<float> vals;
  for (int i = 0; i < 20000; ++i) vals.push_back(static_cast<float>((rng() & 1 ? -1 : 1) * std::exp2(lg(rng))));
  for (double v : {0.0, -0.0, 1.0, 65504.0, 65519.0, 65520.0, -65536.0, 0x1p-24, 0x1p-25, 0x1.8p-25, 0x1p-26,
                   1.0 + 0x1p-11, 1.0 + 0x1p-11 + 0x1p-20, 1.0 + 3 * 0x1p-11, 0x1.ffep-15, 3.0e38})
    vals.push_back(static_cast<float>(v));
  const Tensor x = Tensor::from(vals, {static_cast<int64_t>(vals.size())});
  for (int E : {-20, -3, 0, 7, 30, 126}) {
    int64_t saturated = -1;
    Tensor decoded;
    const autograd::QuantisedOperand q = scalify::cast_fp16(x, E, &saturated, MemoryKind::activation, &decoded);
    ASSERT_EQ(q.codes.dtype(), DType::f16);
    EXPECT_EQ(q.codes.bytes(), vals.size() * 2);
    EXPECT_EQ(q.codes.scale(), std::ldexp(1.0f, E));
    ASSERT_EQ(decoded.dtype(), DType::f32);
    const Tensor again = scalify::decode_fp16_to_f32(q);
    int64_t want_saturated = 0, bad = 0;
    for (size_t i = 0; i < vals.size() && bad < 5; ++i) {
      const double y = std::ldexp(static_cast<double>(vals[i]), -E);
      want_saturated += std::fabs(y) > 65504.0;
      const double want = fp16_round(y);
      const float got = decoded.f32()[i];
      if (!(got == want && std::signbit(got) == std::signbit(want) && again.f32()[i] == got)) {
        ADD_FAILURE() << "E " << E << " x " << vals[i] << ": decode " << got << " / " << again.f32()[i]
                      << ", float64 reference " << want;
        ++bad;
      }
    }
    EXPECT_EQ(saturated, want_saturated) << "E " << E;
  }
}

TEST(ScalifyFp16Cast, NonFiniteValuesStayNonFinite) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from({1.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e30f}, {5});
  int64_t saturated = 0;
  const Tensor d = scalify::decode_fp16_to_f32(scalify::cast_fp16(x, 0, &saturated));
  EXPECT_EQ(d.f32()[0], 1.0f);
  EXPECT_EQ(d.f32()[1], inf);
  EXPECT_EQ(d.f32()[2], -inf);
  EXPECT_TRUE(std::isnan(d.f32()[3]));
  EXPECT_EQ(d.f32()[4], 65504.0f);  // finite overflow saturates and is counted
  EXPECT_EQ(saturated, 1);
}

// Products of two fp16 values are exact in fp32: only the fp32 accumulation
// of K terms differs from FP64 (bound K 2^-24 sum|terms|).
void expect_fp32_sum_close(const float* got, const std::vector<double>& want, const std::vector<double>& mag, int64_t K,
                           const char* what) {
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    const double tol = double(K) * 0x1p-24 * mag[i] + 1e-30;
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i] << " (tol " << tol << ")";
      ++bad;
    }
  }
}

TEST(ScalifyFp16Linear, ForwardAndBackwardMatchFp64OfTheSameFp16Operands) {
  const int64_t M = 40, K = 72, N = 48;
  autograd::Parameter w;
  w.name = "w";  // not a GPT site: the weight keeps its own scale, the others are rescaled dynamically (max)
  w.value = random_tensor({K, N}, 11, 0.05f, MemoryKind::parameter);
  w.grad = Tensor::zeros({K, N}, DType::f32, MemoryKind::gradient);
  const Tensor x = random_tensor({M, K}, 12, 3.0f);
  const Tensor g = random_tensor({M, N}, 13, 1e-6f);  // far below fp16's normal range unscaled
  scalify::ScalifyOptions o;
  o.forward_format = o.backward_format = mantissa::formats::parse_format("fp16");
  auto q = std::make_shared<scalify::ScalifyQuantiser>(o, std::vector<autograd::Parameter*>{&w});

  autograd::OpContext ctx;
  ctx.policy.matmul = DType::f16;
  ctx.policy.quantiser = q;
  autograd::Tape t(ctx);
  autograd::Var xv = t.leaf(x);
  autograd::Var wv = t.param(w);
  autograd::Var y = autograd::linear(t, xv, wv);
  t.backward(y, g);

  // Independent exponents: pow2_down(rms w) for the weight, pow2_down(max|.|) for the others.
  double ss = 0, ax = 0, ag = 0;
  for (int64_t i = 0; i < w.value.numel(); ++i) ss += double(w.value.f32()[i]) * w.value.f32()[i];
  for (int64_t i = 0; i < x.numel(); ++i) ax = std::max(ax, std::fabs(double(x.f32()[i])));
  for (int64_t i = 0; i < g.numel(); ++i) ag = std::max(ag, std::fabs(double(g.f32()[i])));
  const int ew = floor_log2(std::sqrt(ss / double(w.value.numel()))), ex = floor_log2(ax), eg = floor_log2(ag);
  const auto e = q->last_exponents();
  EXPECT_EQ(e.at("weight:w"), ew);
  EXPECT_EQ(e.at("activation:w"), ex);
  EXPECT_EQ(e.at("grad_output:w"), eg);
  EXPECT_EQ(q->stats().saturated_values, 0);

  const auto xd = fp16_dequantised(x, ex), wd = fp16_dequantised(w.value, ew), gd = fp16_dequantised(g, eg);
  std::vector<double> ref, mag;
  ref_product(xd, wd, M, N, K, false, false, ref, mag);
  expect_fp32_sum_close(y.value.f32(), ref, mag, K, "y");
  ref_product(gd, wd, M, K, N, false, true, ref, mag);  // dx = g w^T
  expect_fp32_sum_close(xv.node->grad.f32(), ref, mag, N, "dx");
  ref_product(xd, gd, K, N, M, true, false, ref, mag);  // dw = x^T g
  expect_fp32_sum_close(w.grad.f32(), ref, mag, M, "dw");
  // The fp16 rounding is visible against the exact fp32 operands (it would
  // not be if the casts were skipped), and unscaled fp16 would have lost the
  // gradient: 1e-6 is below fp16's normal range.
  ref_product(std::vector<float>(x.f32(), x.f32() + x.numel()), std::vector<float>(w.value.f32(), w.value.f32() + w.value.numel()),
              M, N, K, false, false, ref, mag);
  double diff = 0;
  for (int64_t i = 0; i < M * N; ++i) diff = std::max(diff, std::fabs(ref[size_t(i)] - y.value.f32()[i]));
  EXPECT_GT(diff, 0.0);
}

TEST(ScalifyFp16Quantiser, RefusesFormatsItCannotCast) {
  autograd::Parameter w;
  w.name = "w";
  w.value = Tensor::zeros({2, 2}, DType::f32, MemoryKind::parameter);
  scalify::ScalifyOptions o;
  o.forward_format = mantissa::formats::parse_format("fp32");
  try {
    scalify::ScalifyQuantiser q(o, {&w});
    ADD_FAILURE() << "fp32 accepted as a cast format";
  } catch (const std::invalid_argument& err) {
    EXPECT_NE(std::string(err.what()).find("fp32"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("fp16"), std::string::npos) << err.what();  // the valid list
  }
  o.forward_format = mantissa::formats::parse_format("fp16");
  o.backward_format = mantissa::formats::parse_format("bf16");
  EXPECT_THROW(scalify::ScalifyQuantiser(o, {&w}), std::invalid_argument);
}

// ---- training ------------------------------------------------------------------------------
// Sequences of the tiny GPT's recurrence with a random step: learnable, so the loss falls.
nn::Batch batch(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return recurrence_batch(rng, 8, /*noisy=*/true);
}

struct TrainRun {
  std::vector<double> losses;
  int skipped = 0;
  int64_t last_step_rescales = 0;
  int64_t saturated = 0;
};

TrainRun train(const char* recipe, int steps) {
  nn::GPT model(tiny_gpt_config(2, 3));
  const recipe::Recipe r = recipe::find_recipe(recipe);
  optim::OptimizerConfig oc;
  auto opt = optim::make_optimizer(oc, model.parameters());
  amp::Amp a(model, *opt, r);
  TrainRun run;
  for (int s = 0; s < steps; ++s) {
    const nn::LossSum l = a.backward(batch(100 + static_cast<uint64_t>(s)));
    run.skipped += a.step(3e-3).skipped;
    run.losses.push_back(l.sum / l.count);
  }
  if (auto* q = dynamic_cast<scalify::ScalifyQuantiser*>(model.precision().quantiser.get())) {
    run.last_step_rescales = q->stats().last_step_rescales;
    run.saturated = q->stats().saturated_values;
  }
  return run;
}

double mean_last(const std::vector<double>& v, size_t n) {
  double s = 0;
  for (size_t i = v.size() - n; i < v.size(); ++i) s += v[i];
  return s / static_cast<double>(n);
}

TEST(ScalifyFp16Recipes, TrainATinyGptToFp32sLoss) {
  omp_set_num_threads(1);  // tiny shapes: threads only add synchronisation on a busy machine
  const int steps = 60;
  const TrainRun ref = train("fp32", steps), f16 = train("scalify-fp16", steps), f16m = train("scalify-fp16-master", steps);
  const double l32 = mean_last(ref.losses, 10), l16 = mean_last(f16.losses, 10), l16m = mean_last(f16m.losses, 10);
  std::printf("[scalify-fp16] loss over the last 10 of %d steps: fp32 %.5f scalify-fp16 %.5f (%+.3f%%) "
              "scalify-fp16-master %.5f (%+.3f%%); rescales in the last step %ld; saturated %ld\n",
              steps, l32, l16, 100 * (l16 / l32 - 1), l16m, 100 * (l16m / l32 - 1), static_cast<long>(f16.last_step_rescales),
              static_cast<long>(f16.saturated));
  EXPECT_LT(l32, 0.6 * ref.losses.front());  // the model learns
  EXPECT_EQ(f16.skipped, 0);
  EXPECT_EQ(f16m.skipped, 0);
  // The first step's loss differs only by the fp16 forward rounding.
  EXPECT_NEAR(f16.losses.front(), ref.losses.front(), 1e-3 * ref.losses.front());
  EXPECT_NE(f16.losses.front(), ref.losses.front());  // the casts happened
  EXPECT_NEAR(l16, l32, 0.02 * l32);
  EXPECT_NEAR(l16m, l32, 0.03 * l32);
  EXPECT_EQ(f16.last_step_rescales, 2 * 2 + 1);  // 2 per layer + the head
  EXPECT_EQ(f16.saturated, 0);
}

}  // namespace
