// MLP: layout and init, whole-model gradients against float64 finite
// differences (ReLU and GELU), ignore index, grad_scale, evaluate.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>

#include "mantissa/nn/mlp.hpp"

using namespace mantissa;
using nn::MLP;
using nn::MLPConfig;
using Vec = std::vector<double>;

namespace {

MLPConfig small(const std::string& activation) {
  MLPConfig c;
  c.inputs = 12;
  c.hidden = {10, 7};
  c.classes = 5;
  c.activation = activation;
  c.seed = 3;
  return c;
}

double act(const std::string& a, double x) {
  if (a == "relu") return std::max(0.0, x);
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// float64 MLP: summed cross-entropy over rows with target >= 0.
double ref_loss(const std::vector<Vec>& p, const MLPConfig& c, const Vec& x, const std::vector<int32_t>& tg) {
  const int64_t B = static_cast<int64_t>(tg.size());
  Vec h = x;
  int64_t in = c.inputs;
  const size_t layers = p.size() / 2;
  for (size_t l = 0; l < layers; ++l) {
    const int64_t out = static_cast<int64_t>(p[2 * l + 1].size());
    Vec y(B * out);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t o = 0; o < out; ++o) {
        double s = p[2 * l + 1][o];
        for (int64_t i = 0; i < in; ++i) s += h[b * in + i] * p[2 * l][i * out + o];
        y[b * out + o] = l + 1 < layers ? act(c.activation, s) : s;
      }
    h = y;
    in = out;
  }
  double loss = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (tg[b] < 0) continue;
    double m = -1e300, z = 0;
    for (int64_t k = 0; k < in; ++k) m = std::max(m, h[b * in + k]);
    for (int64_t k = 0; k < in; ++k) z += std::exp(h[b * in + k] - m);
    loss += m + std::log(z) - h[b * in + tg[b]];
  }
  return loss;
}

}  // namespace

TEST(MLP, LayoutAndInit) {
  MLP m(small("relu"));
  auto ps = m.parameters();
  ASSERT_EQ(ps.size(), 6u);
  EXPECT_EQ(ps[0]->name, "layers.0.weight");
  EXPECT_EQ(ps[0]->value.shape(), (Shape{12, 10}));
  EXPECT_EQ(ps[3]->name, "layers.1.bias");
  EXPECT_EQ(ps[4]->value.shape(), (Shape{7, 5}));
  EXPECT_FALSE(ps[1]->decay);
  EXPECT_TRUE(ps[2]->decay);
  EXPECT_EQ(m.parameter_count(), 12 * 10 + 10 + 10 * 7 + 7 + 7 * 5 + 5);
  MLPConfig back = MLPConfig::from_json(m.config_json());
  EXPECT_EQ(back.hidden, (std::vector<int64_t>{10, 7}));
  EXPECT_EQ(back.activation, "relu");
  // He init of a wide layer: sd sqrt(2 / 784).
  MLP wide(MLPConfig{});
  auto w = wide.find("layers.0.weight")->value.to_vector();
  double s2 = 0;
  for (float v : w) s2 += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(s2 / w.size()), std::sqrt(2.0 / 784), 0.02 * std::sqrt(2.0 / 784));
  MLPConfig bad = small("tanh");
  EXPECT_THROW(MLP{bad}, std::invalid_argument);
}

TEST(MLP, GradientsMatchFloat64FiniteDifferences) {
  for (const char* a : {"relu", "gelu"}) {
    SCOPED_TRACE(a);
    const MLPConfig c = small(a);
    MLP m(c);
    const int64_t B = 6;
    std::mt19937_64 g(9);
    std::normal_distribution<double> n(0.0, 1.0);
    Vec x(B * c.inputs);
    for (auto& v : x) v = static_cast<float>(n(g));
    std::vector<int32_t> tg = {0, 4, -1, 2, 2, 1};
    nn::Batch batch{Tensor::empty({B, c.inputs}), Tensor::empty({B}, DType::i32)};
    for (size_t i = 0; i < x.size(); ++i) batch.inputs.f32()[i] = static_cast<float>(x[i]);
    for (int64_t i = 0; i < B; ++i) batch.targets.data<int32_t>()[i] = tg[i];
    std::vector<Vec> p;
    for (auto* q : m.parameters()) {
      for (int64_t i = 0; i < q->value.numel(); ++i) q->value.f32()[i] = static_cast<float>(0.5 * n(g));
      auto v = q->value.to_vector();
      p.emplace_back(v.begin(), v.end());
    }
    m.zero_grad();
    nn::LossSum l = m.forward_backward(batch, 1.0f);
    const double want = ref_loss(p, c, x, tg);
    EXPECT_EQ(l.count, 5);
    EXPECT_NEAR(l.sum, want, 1e-5 * std::abs(want));
    EXPECT_NEAR(m.evaluate(batch).sum, want, 1e-5 * std::abs(want));
    const double h = 1e-6;
    size_t k = 0;
    for (auto* q : m.parameters()) {
      auto grad = q->grad.to_vector();
      double gmax = 0;
      for (float v : grad) gmax = std::max(gmax, static_cast<double>(std::abs(v)));
      for (size_t i = 0; i < grad.size(); ++i) {
        auto plus = p, minus = p;
        plus[k][i] += h;
        minus[k][i] -= h;
        const double fd = (ref_loss(plus, c, x, tg) - ref_loss(minus, c, x, tg)) / (2 * h);
        ASSERT_NEAR(grad[i], fd, 1e-4 * std::max(gmax, 1e-3)) << q->name << " element " << i;
      }
      ++k;
    }
    // grad_scale 0.5 halves every gradient exactly (power of two).
    std::vector<std::vector<float>> g1;
    for (auto* q : m.parameters()) g1.push_back(q->grad.to_vector());
    m.zero_grad();
    m.forward_backward(batch, 0.5f);
    k = 0;
    for (auto* q : m.parameters()) {
      auto gh = q->grad.to_vector();
      for (size_t i = 0; i < gh.size(); ++i) ASSERT_EQ(gh[i], 0.5f * g1[k][i]) << q->name;
      ++k;
    }
  }
}

TEST(MLP, BadBatchesAreRejected) {
  MLP m(small("relu"));
  nn::Batch wrong_width{Tensor::zeros({2, 11}), Tensor::zeros({2}, DType::i32)};
  EXPECT_THROW(m.evaluate(wrong_width), std::invalid_argument);
  nn::Batch wrong_targets{Tensor::zeros({2, 12}), Tensor::zeros({3}, DType::i32)};
  EXPECT_THROW(m.forward_backward(wrong_targets, 1.0f), std::invalid_argument);
  nn::Batch class_out_of_range{Tensor::zeros({1, 12}), Tensor::zeros({1}, DType::i32)};
  class_out_of_range.targets.data<int32_t>()[0] = 5;
  EXPECT_THROW(m.evaluate(class_out_of_range), std::out_of_range);
}
