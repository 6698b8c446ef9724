// Scaled tensors: power-of-two scale rounding (all four modes, stochastic
// checked statistically), per-tensor / per-row / per-block scales, the scale
// ops (set / stop / get / rebalance), dynamic rescaling by max, L1 and L2,
// casts of the data; and the jax-scalify #63 experiment: does stochastic
// rounding of scales stop a long add chain from drifting?
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "mantissa/formats/round.hpp"
#include "mantissa/scalify/propagate.hpp"

using namespace mantissa;
using namespace mantissa::scalify;

namespace {

TEST(Pow2Round, DeterministicModes) {
  EXPECT_EQ(pow2_round(3.0), 2.0f);
  EXPECT_EQ(pow2_round(3.0, ScaleRounding::up), 4.0f);
  EXPECT_EQ(pow2_round(3.0, ScaleRounding::nearest), 4.0f);  // 3 > 2 sqrt 2
  EXPECT_EQ(pow2_round(2.5, ScaleRounding::nearest), 2.0f);
  EXPECT_EQ(pow2_round(0.3, ScaleRounding::down), 0.25f);
  EXPECT_EQ(pow2_round(0.3, ScaleRounding::up), 0.5f);
  for (auto m : {ScaleRounding::down, ScaleRounding::up, ScaleRounding::nearest}) {
    EXPECT_EQ(pow2_round(8.0, m), 8.0f);
    EXPECT_EQ(pow2_round(std::ldexp(1.0, -100), m), std::ldexp(1.0f, -100));
  }
  EXPECT_THROW(pow2_round(0.0), std::invalid_argument);
  EXPECT_THROW(pow2_round(INFINITY), std::invalid_argument);
  EXPECT_THROW(pow2_round(3.0, ScaleRounding::stochastic), std::invalid_argument);
  EXPECT_EQ(parse_scale_rounding("stochastic"), ScaleRounding::stochastic);
  EXPECT_THROW(parse_scale_rounding("random"), std::invalid_argument);
}

TEST(Pow2Round, StochasticIsUnbiasedInTheScale) {
  // x = 2.25: P(4) = 0.125; x = 3: P(4) = 0.5; E[scale] = x.
  for (double x : {2.25, 3.0, 0.7}) {
    Pow2Rounder r(ScaleRounding::stochastic, 99);
    const int n = 40000;
    double sum = 0;
    const double lo = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(x))));
    int ups = 0;
    for (int i = 0; i < n; ++i) {
      const float s = r(x);
      ASSERT_TRUE(s == lo || s == 2 * lo) << s;
      ups += s == 2 * lo;
      sum += s;
    }
    const double p = x / lo - 1;
    EXPECT_NEAR(static_cast<double>(ups) / n, p, 4 * std::sqrt(p * (1 - p) / n) + 1e-9) << x;
    EXPECT_NEAR(sum / n, x, 0.01 * x) << x;
  }
  // Same seed, same draws.
  Pow2Rounder a(ScaleRounding::stochastic, 5), b(ScaleRounding::stochastic, 5);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a(1.37), b(1.37));
}

TEST(ScaledTensor, GranularitiesRepresentTheValuesExactly) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(6 * 70);
  for (size_t i = 0; i < v.size(); ++i) v[i] = nd(rng) * std::ldexp(1.0f, static_cast<int>(i / 70) * 3 - 8);
  std::fill(v.begin() + 70, v.begin() + 140, 0.0f);  // an all-zero row: any scale
  const Tensor t = Tensor::from(v, {6, 70});
  for (auto g : {Granularity::tensor, Granularity::row, Granularity::block}) {
    const ScaledTensor s = quantise_scales(t, g, 32, 1.0, ScaleRounding::up);
    s.validate("test");
    EXPECT_EQ(s.scales.size(), g == Granularity::tensor ? 1u : (g == Granularity::row ? 6u : 18u));
    const auto back = s.values();
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(back[i], v[i]);  // powers of two: exact
    // Every group's max |data| in (1/2, 1] (zero groups: 0, scale 1).
    const auto d = s.data.to_vector();
    const int64_t group = g == Granularity::tensor ? 420 : (g == Granularity::row ? 70 : 32);
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t c = 0; c < 70; c += (g == Granularity::tensor ? 70 : group)) {
        float mx = 0;
        const int64_t end = g == Granularity::tensor ? 420 : std::min<int64_t>(70, c + group);
        const int64_t begin = g == Granularity::tensor ? 0 : r * 70 + c;
        for (int64_t i = begin; i < (g == Granularity::tensor ? end : r * 70 + end); ++i)
          mx = std::max(mx, std::abs(d[static_cast<size_t>(i)]));
        if (r == 1 && g != Granularity::tensor) EXPECT_EQ(mx, 0.0f);
        else EXPECT_TRUE(mx > 0.5f && mx <= 1.0f) << "group max " << mx;
        if (g == Granularity::tensor) break;
      }
  }
  // Default rounding (down): max |data| in [1, 2).
  const auto dd = quantise_scales(t, Granularity::tensor).data.to_vector();
  float mx_down = 0;
  for (float e : dd) mx_down = std::max(mx_down, std::abs(e));
  EXPECT_TRUE(mx_down >= 1.0f && mx_down < 2.0f) << mx_down;
  ScaledTensor bad = quantise_scales(t, Granularity::tensor);
  bad.scales[0] = 3.0f;
  EXPECT_THROW(bad.validate("test"), std::invalid_argument);
}

TEST(ScaledTensor, ScaleOpsKeepTheValue) {
  const Tensor t = Tensor::from({0.5f, -3.0f, 12.0f, 0.125f}, {2, 2});
  const ScaledTensor x = quantise_scales(t, Granularity::tensor, 0, 1.0, ScaleRounding::up);
  EXPECT_EQ(x.scale(), 16.0f);
  const ScaledTensor s = set_scale(x, 0.5f);
  EXPECT_EQ(s.scale(), 0.5f);
  EXPECT_EQ(s.values(), t.to_vector());
  EXPECT_EQ(s.data.to_vector()[2], 24.0f);
  const ScaledTensor st = stop_scale(x);
  EXPECT_EQ(st.scale(), 1.0f);
  EXPECT_EQ(st.data.to_vector(), t.to_vector());
  const ScaledTensor g = get_scale(x);
  EXPECT_EQ(g.values(), std::vector<float>{16.0f});
  const ScaledTensor rb = rebalance(x, -4);
  EXPECT_EQ(rb.scale(), 1.0f);
  EXPECT_EQ(rb.values(), t.to_vector());
  EXPECT_THROW(set_scale(x, 3.0f), std::invalid_argument);
}

TEST(ScaledTensor, DynamicRescaleByMaxL1L2) {
  const Tensor t = Tensor::from({3.0f, -4.0f, 0.0f, 1.0f}, {4});
  const ScaledTensor x = scaled_from(t);
  Pow2Rounder r;
  // max 4 -> 4; L1 mean 2 -> 2; L2 sqrt(26/4) = 2.55 -> 2.
  EXPECT_EQ(dynamic_rescale(x, Norm::max, r).scale(), 4.0f);
  EXPECT_EQ(dynamic_rescale(x, Norm::l1, r).scale(), 2.0f);
  EXPECT_EQ(dynamic_rescale(x, Norm::l2, r).scale(), 2.0f);
  EXPECT_EQ(dynamic_rescale(x, Norm::l2, r).values(), t.to_vector());
  // Floor 2^-14: a tiny tensor does not get a tinier scale.
  const ScaledTensor tiny = scaled_from(Tensor::from({1e-9f, -2e-9f}, {2}));
  EXPECT_EQ(dynamic_rescale(tiny, Norm::max, r).scale(), std::ldexp(1.0f, -14));
  // Zero tensor: any scale, unchanged.
  const ScaledTensor zero = set_scale(scaled_from(Tensor::zeros({3})), 64.0f);
  EXPECT_EQ(dynamic_rescale(zero, Norm::l2, r).scale(), 64.0f);
}

TEST(ScaledTensor, CastActsOnDataOnly) {
  const ScaledTensor x = set_scale(scaled_from(Tensor::from({1000.3f, -0.0001234f, 7.77f}, {3})), 1024.0f);
  const ScaledTensor c = cast(x, DType::f16);
  EXPECT_EQ(c.data.dtype(), DType::f16);
  EXPECT_EQ(c.scale(), 1024.0f);
  const auto& f16 = formats::preset("fp16");
  const auto d = x.data.to_vector(), v = c.values();
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(v[i], formats::decode_f32(f16, formats::encode(f16, d[i])) * 1024.0f);
}

// jax-scalify #63: a chain x_{k+1} = x_k + y_k of N adds of independent unit
// tensors. The true RMS of x_k is sqrt(k+1); the add rule's scale is
// round(sqrt(x.s^2 + 1)). Rounding down gets stuck at 1 (sqrt 2 -> 1), so the
// data carries the whole growth (drift); up overshoots; stochastic tracks
// the scale in expectation. Reported: final data RMS (ideal ~1) and
// log2(scale / true RMS).
struct ChainResult {
  double data_rms, log2_scale_error;
};

ChainResult add_chain(ScaleRounding mode, int steps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Pow2Rounder r(mode, seed);
  const int64_t n = 2048;
  auto unit = [&] {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = nd(rng);
    return scaled_from(Tensor::from(v, {n}));
  };
  ScaledTensor x = unit();
  for (int k = 0; k < steps; ++k) x = add(x, unit(), r);
  const auto d = x.data.to_vector();
  double ss = 0;
  for (float v : d) ss += static_cast<double>(v) * v;
  const double rms = std::sqrt(ss / static_cast<double>(n));
  return {rms, std::log2(x.scale() / std::sqrt(steps + 1.0))};
}

TEST(ScaleDrift, StochasticScaleRoundingStopsTheAddChainDrift) {
  const int steps = 1024;
  const ChainResult down = add_chain(ScaleRounding::down, steps, 1);
  const ChainResult nearest = add_chain(ScaleRounding::nearest, steps, 1);
  const ChainResult up = add_chain(ScaleRounding::up, steps, 1);
  std::printf("[drift] %d adds: down data_rms %.3g log2(scale/true) %+.2f | nearest %.3g %+.2f | up %.3g %+.2f\n",
              steps, down.data_rms, down.log2_scale_error, nearest.data_rms, nearest.log2_scale_error, up.data_rms,
              up.log2_scale_error);
  // Down: the scale is stuck at 1, the data grows like sqrt(N): 32.
  EXPECT_GT(down.data_rms, 16.0);
  EXPECT_GT(nearest.data_rms, 8.0);  // nearest gets stuck at 2 (sqrt 5 < 2 sqrt 2)
  EXPECT_LT(up.data_rms, 1e-3);  // up: the scale doubles on every add until sqrt(s^2 + 1) == s in fp64 (2^26)
  double worst = 0, mean = 0;
  const int seeds = 8;
  for (int s = 0; s < seeds; ++s) {
    const ChainResult st = add_chain(ScaleRounding::stochastic, steps, 100 + static_cast<uint64_t>(s));
    worst = std::max(worst, std::abs(std::log2(st.data_rms)));
    mean += st.log2_scale_error / seeds;
    std::printf("[drift] stochastic seed %d: data_rms %.3g log2(scale/true) %+.2f\n", s, st.data_rms,
                st.log2_scale_error);
  }
  // Stochastic: the data stays within a factor 4 of unit RMS for every seed.
  EXPECT_LT(worst, 2.0);
  EXPECT_LT(std::abs(mean), 1.0);
}

}  // namespace
