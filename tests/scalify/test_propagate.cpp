// Every scale-propagation rule against a float64 recomputation of the op on
// data x scale (tests/reference_ops.hpp, written independently of
// src/scalify), plus the rule's own scale computed here, and the error for
// ops without a rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "mantissa/scalify/propagate.hpp"
#include "reference_ops.hpp"
#include "scaled_tensors.hpp"

using namespace mantissa;
using namespace mantissa::scalify;
using ref::Vec;

namespace {

using test::expect_close;
using test::make_scaled;
using test::values;

double data_rms(const ScaledTensor& x) {
  const auto d = x.data.to_vector();
  double s = 0;
  for (float v : d) s += static_cast<double>(v) * v;
  return std::sqrt(s / static_cast<double>(d.size()));
}

TEST(Propagate, AddSubUseTheRoundedRootSumOfSquaresScale) {
  Pow2Rounder r;
  const auto a = make_scaled({7, 9}, 3, 1), b = make_scaled({7, 9}, -2, 2);
  const Vec va = values(a), vb = values(b);
  Vec sum(va.size()), diff(va.size());
  for (size_t i = 0; i < va.size(); ++i) sum[i] = va[i] + vb[i], diff[i] = va[i] - vb[i];
  const ScaledTensor c = add(a, b, r), d = sub(a, b, r);
  // sqrt(64 + 1/16) = 8.0039 -> 8.
  EXPECT_EQ(c.scale(), 8.0f);
  EXPECT_EQ(d.scale(), 8.0f);
  expect_close(c, sum, 1e-6, "add");
  expect_close(d, diff, 1e-6, "sub");
  // Equal scales 2^0: sqrt 2 rounds down to 1, up to 2.
  Pow2Rounder up(ScaleRounding::up);
  const auto e = make_scaled({5}, 0, 3), f = make_scaled({5}, 0, 4);
  EXPECT_EQ(add(e, f, r).scale(), 1.0f);
  EXPECT_EQ(add(e, f, up).scale(), 2.0f);
  // A zero operand is "any scale": the other's scale is kept.
  ScaledTensor z = make_scaled({5}, 10, 5, 0.0);
  EXPECT_EQ(add(e, z, r).scale(), 1.0f);
  expect_close(add(e, z, r), values(e), 0, "add zero");
}

TEST(Propagate, AddBiasBroadcastsWithTheAddRule) {
  Pow2Rounder r;
  const auto x = make_scaled({6, 5}, -1, 6), b = make_scaled({5}, 1, 7);
  Vec want = values(x);
  const Vec vb = values(b);
  for (size_t i = 0; i < want.size(); ++i) want[i] += vb[i % 5];
  const auto y = add_bias(x, b, r);
  EXPECT_EQ(y.scale(), 2.0f);  // sqrt(1/4 + 4) = 2.06 -> 2
  expect_close(y, want, 1e-6, "add_bias");
}

TEST(Propagate, MulDivMultiplyScales) {
  const auto a = make_scaled({4, 4}, 5, 8), b = make_scaled({4, 4}, -3, 9, 1.0);
  Vec m(16), q(16);
  const Vec va = values(a), vb = values(b);
  for (size_t i = 0; i < 16; ++i) m[i] = va[i] * vb[i], q[i] = va[i] / vb[i];
  EXPECT_EQ(mul(a, b).scale(), 4.0f);
  EXPECT_EQ(div(a, b).scale(), 256.0f);
  expect_close(mul(a, b), m, 1e-6, "mul");
  expect_close(div(a, b), q, 1e-5, "div");
}

TEST(Propagate, MatmulDividesDataBySqrtKAndKeepsItUnitSized) {
  Pow2Rounder r;
  const int64_t M = 17, K = 200, N = 23;
  const auto a = make_scaled({M, K}, -4, 10), b = make_scaled({K, N}, 2, 11);
  const auto c = matmul(a, b, r);
  EXPECT_EQ(c.scale(), std::ldexp(1.0f, -4 + 2 + 3));  // sqrt 200 = 14.1 -> 8
  expect_close(c, ref::matmul(values(a), values(b), M, K, N), 1e-5, "matmul");
  EXPECT_GT(data_rms(c), 1.0);  // rounding down keeps E[data^2] >= 1 ...
  EXPECT_LT(data_rms(c), 2.5);  // ... and within a factor sqrt 2 x noise of it
}

TEST(Propagate, ReduceSumSelectionLayoutAndEmbedding) {
  Pow2Rounder r;
  const auto x = make_scaled({3, 50}, 1, 12);
  Vec want(3, 0.0);
  const Vec vx = values(x);
  for (size_t i = 0; i < vx.size(); ++i) want[i / 50] += vx[i];
  const auto s = reduce_sum(x, r);
  EXPECT_EQ(s.scale(), 2.0f * 4.0f);  // sqrt 50 = 7.07 -> 4
  expect_close(s, want, 1e-6, "reduce_sum");

  const auto a = make_scaled({4, 6}, 3, 13), b = make_scaled({4, 6}, -1, 14);
  const Vec va = values(a), vb = values(b);
  Vec mx(24), mn(24), sel(24);
  Tensor cond = Tensor::empty({4, 6});
  for (size_t i = 0; i < 24; ++i) {
    mx[i] = std::max(va[i], vb[i]);
    mn[i] = std::min(va[i], vb[i]);
    cond.f32()[i] = i % 3 == 0 ? 1.0f : 0.0f;
    sel[i] = i % 3 == 0 ? va[i] : vb[i];
  }
  EXPECT_EQ(maximum(a, b).scale(), 8.0f);
  expect_close(maximum(a, b), mx, 1e-7, "max");
  expect_close(minimum(a, b), mn, 1e-7, "min");
  expect_close(select(cond, a, b), sel, 1e-7, "select");
  const ScaledTensor both[] = {a, b};
  const auto cat = concat(both);
  EXPECT_EQ(cat.scale(), 8.0f);
  EXPECT_EQ(cat.shape(), (Shape{4, 12}));
  const Vec vc = values(cat);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j) {
      EXPECT_EQ(vc[static_cast<size_t>(i * 12 + j)], va[static_cast<size_t>(i * 6 + j)]);
      EXPECT_EQ(vc[static_cast<size_t>(i * 12 + 6 + j)], vb[static_cast<size_t>(i * 6 + j)]);
    }
  expect_close(transpose(a), ref::transpose(va, 4, 6), 0, "transpose");
  EXPECT_EQ(transpose(a).scale(), 8.0f);
  expect_close(reshape(a, {24}), va, 0, "reshape");
  expect_close(slice_rows(a, 1, 3), Vec(va.begin() + 6, va.begin() + 18), 0, "slice");

  const auto w = make_scaled({10, 3}, -2, 15);
  Tensor ids = Tensor::empty({2, 2}, DType::i32);
  const int32_t id[] = {3, 0, 9, 3};
  std::copy(id, id + 4, ids.data<int32_t>());
  const auto e = embedding(ids, w);
  EXPECT_EQ(e.scale(), 0.25f);
  const Vec vw = values(w);
  Vec we;
  for (int32_t k : id) we.insert(we.end(), vw.begin() + k * 3, vw.begin() + k * 3 + 3);
  expect_close(e, we, 0, "embedding");
}

TEST(Propagate, ElementwiseMath) {
  const auto x = make_scaled({40}, -3, 16);
  Vec ex, lg, sq, p3;
  auto pos = x;  // positive data for log / sqrt
  {
    auto d = pos.data.to_vector();
    for (float& v : d) v = std::abs(v) + 0.01f;
    pos.data = Tensor::from(d, {40});
  }
  for (double v : values(x)) ex.push_back(std::exp(v)), p3.push_back(v * v * v);
  for (double v : values(pos)) lg.push_back(std::log(v)), sq.push_back(std::sqrt(v));
  expect_close(scalify::exp(x), ex, 1e-6, "exp");
  EXPECT_EQ(scalify::exp(x).scale(), 1.0f);
  expect_close(scalify::log(pos), lg, 1e-6, "log");
  expect_close(scalify::sqrt(pos), sq, 1e-6, "sqrt");
  EXPECT_EQ(scalify::sqrt(pos).scale(), 0.25f);  // 2^-3: one 2 moves into the data, 2^-4 -> 2^-2
  expect_close(scalify::pow(x, 3), p3, 1e-6, "pow");
  EXPECT_EQ(scalify::pow(x, 3).scale(), std::ldexp(1.0f, -9));
}

double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(Propagate, GeluKeepsTheInputScaleAndItsBackwardMatchesFiniteDifferences) {
  const auto x = make_scaled({300}, 2, 17), dy = make_scaled({300}, -6, 18);
  Vec want, dwant;
  const Vec vx = values(x), vdy = values(dy);
  for (size_t i = 0; i < vx.size(); ++i) {
    want.push_back(gelu_tanh(vx[i]));
    const double h = 1e-5 * std::max(1.0, std::abs(vx[i]));
    dwant.push_back(vdy[i] * (gelu_tanh(vx[i] + h) - gelu_tanh(vx[i] - h)) / (2 * h));
  }
  EXPECT_EQ(gelu(x).scale(), 4.0f);
  expect_close(gelu(x), want, 1e-6, "gelu");
  EXPECT_EQ(gelu_backward(x, dy).scale(), dy.scale());
  expect_close(gelu_backward(x, dy), dwant, 1e-6, "gelu_backward");
}

TEST(Propagate, LayerNormForwardAndBackward) {
  Pow2Rounder r;
  const int64_t R = 5, C = 64;
  // x at scale 2^-9: eps must act on the values, not the data.
  const auto x = make_scaled({R, C}, -9, 19, 0.01);
  const auto w = make_scaled({C}, 1, 20), b = make_scaled({C}, -3, 21), dy = make_scaled({R, C}, -12, 22);
  const auto y = layer_norm(x, w, b, r);
  EXPECT_EQ(y.scale(), 2.0f);  // sqrt(4 + 1/64) -> 2
  expect_close(y, ref::layer_norm(values(x), values(w), values(b), R, C, 1e-5), 1e-5, "layer_norm");
  const auto dx = layer_norm_backward(x, w, dy);
  EXPECT_EQ(dx.scale(), std::ldexp(1.0f, -12 + 1 + 9));
  expect_close(dx, ref::layer_norm_backward(values(x), values(w), values(dy), R, C, 1e-5).dx, 1e-5,
               "layer_norm_backward");
}

TEST(Propagate, SoftmaxForwardAndBackward) {
  const int64_t R = 6, C = 33;
  const auto x = make_scaled({R, C}, 1, 23), dy = make_scaled({R, C}, 4, 24);
  const Vec p = ref::softmax(values(x), R, C);
  const auto y = softmax(x);
  EXPECT_EQ(y.scale(), 1.0f);
  expect_close(y, p, 1e-6, "softmax");
  const auto dx = softmax_backward(y, dy);
  EXPECT_EQ(dx.scale(), 16.0f);
  expect_close(dx, ref::softmax_backward(p, values(dy), R, C), 1e-5, "softmax_backward");
}

TEST(Propagate, CausalAttentionKeepsTheScaleOfQkv) {
  const int64_t B = 2, T = 7, H = 2, D = 4, C = H * D;
  const auto qkv = make_scaled({B, T, 3 * C}, -1, 25);
  const Vec v = values(qkv);
  const auto out = causal_attention(qkv, H);
  EXPECT_EQ(out.scale(), 0.5f);
  expect_close(out, ref::fused_attention(v, B, T, C, H).out, 1e-6, "causal_attention");
}

// The rules on scales alone, which the `propagate` quantiser follows: exact values of the
// formulas, and the tensor rules above give the same scales.
TEST(ScaleRule, FormulasAndTheTensorRulesAgree) {
  Pow2Rounder down;
  EXPECT_EQ(scale_rule::sqrt_fan(64, down), 8.0f);
  EXPECT_EQ(scale_rule::sqrt_fan(96, down), 8.0f);  // sqrt 96 = 9.8
  EXPECT_EQ(scale_rule::add(1.0, 1.0, down), 1.0);  // sqrt 2 rounds down
  EXPECT_EQ(scale_rule::add(4.0, 4.0, down), 4.0);
  EXPECT_EQ(scale_rule::add(4.0, 8.0, down), 8.0);  // sqrt 80 = 8.9
  EXPECT_EQ(scale_rule::add(0.0, 0.25, down), 0.25);  // "any scale" takes the other
  EXPECT_EQ(scale_rule::add(0.25, 0.0, down), 0.25);
  EXPECT_EQ(scale_rule::matmul(0.5, 0.125, 8.0), 0.5);
  EXPECT_EQ(scale_rule::layer_norm(0.5, 0.0, down), 0.5);
  EXPECT_EQ(scale_rule::causal_attention_backward(0.125, 0.5), 0.125);
  EXPECT_EQ(scale_rule::causal_attention_backward(0.125, 4.0), 2.0);
  Pow2Rounder up(ScaleRounding::up);
  EXPECT_EQ(scale_rule::add(1.0, 1.0, up), 2.0);

  const auto a = make_scaled({8, 96}, 2, 61), b = make_scaled({96, 5}, -3, 62), bias = make_scaled({5}, 3, 63);
  const auto y = matmul(a, b, down);
  EXPECT_EQ(y.scale(), scale_rule::matmul(4.0, 0.125, scale_rule::sqrt_fan(96, down)));
  EXPECT_EQ(add_bias(y, bias, down).scale(), scale_rule::add(y.scale(), 8.0, down));
  const auto w = make_scaled({96}, -1, 64), wb = make_scaled({96}, 1, 65);
  EXPECT_EQ(layer_norm(a, w, wb, down).scale(), scale_rule::layer_norm(0.5, 2.0, down));
  EXPECT_EQ(gelu(a).scale(), scale_rule::gelu(4.0));
}

// d(qkv) of causal attention in float64 (reference_ops.hpp), qkv of scale s and dO of
// scale 1, divided by the rule's scale dO.s max(1, s^2): its largest entry stays O(1) where
// dQ and dK carry the s^2 (s = 2) and where the rule is dO's scale (s <= 1).
TEST(ScaleRule, CausalAttentionBackwardBoundsTheGradient) {
  const int64_t S = 16, D = 16;
  for (const int e : {-2, 0, 1}) {
    SCOPED_TRACE(e);
    const double s = std::ldexp(1.0, e);
    const Vec q = values(make_scaled({S, D}, e, 71)), k = values(make_scaled({S, D}, e, 72)),
              v = values(make_scaled({S, D}, e, 73)), g = values(make_scaled({S, D}, 0, 74));
    const double c = 1.0 / std::sqrt(static_cast<double>(D));
    const auto fwd = ref::attention(q, k, v, {1, S, 1, 1, D}, c);
    const auto grads = ref::attention_backward(q, k, v, fwd.probs, g, {1, S, 1, 1, D}, c);
    double largest = 0, largest_qk = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      largest_qk = std::max({largest_qk, std::abs(grads.dq[i]), std::abs(grads.dk[i])});
      largest = std::max({largest, largest_qk, std::abs(grads.dv[i])});
    }
    const double rule = scale_rule::causal_attention_backward(1.0, s);
    std::printf("s = 2^%d: max |d(qkv)| / rule %.3f, max |dQ, dK| / rule %.3f\n", e, largest / rule, largest_qk / rule);
    EXPECT_LT(largest / rule, 8.0);
    EXPECT_GT(largest / rule, 0.25);
  }
}

TEST(Propagate, CrossEntropyForwardAndBackward) {
  const int64_t N = 5, V = 11;
  const auto logits = make_scaled({N, V}, 2, 26);
  Tensor targets = Tensor::empty({N}, DType::i32);
  const int32_t t[] = {3, -1, 10, 0, 7};
  std::copy(t, t + N, targets.data<int32_t>());
  const Vec lv = values(logits);
  const Vec p = ref::softmax(lv, N, V);
  double loss = 0;
  Vec grad(lv.size(), 0.0);
  ScaledTensor seed;
  seed.data = Tensor::from({0.75f}, {1});
  seed.scales = {std::ldexp(1.0f, -7)};
  for (int64_t i = 0; i < N; ++i) {
    if (t[i] < 0) continue;
    loss -= std::log(p[static_cast<size_t>(i * V + t[i])]);
    for (int64_t j = 0; j < V; ++j)
      grad[static_cast<size_t>(i * V + j)] = (p[static_cast<size_t>(i * V + j)] - (j == t[i] ? 1 : 0)) * 0.75 * std::ldexp(1.0, -7);
  }
  expect_close(cross_entropy(logits, targets), {loss}, 1e-6, "cross_entropy");
  const auto d = cross_entropy_backward(logits, targets, seed);
  EXPECT_EQ(d.scale(), seed.scale());
  expect_close(d, grad, 1e-6, "cross_entropy_backward");
}

TEST(Propagate, AnOpWithoutARuleIsAnErrorNamingIt) {
  Pow2Rounder r;
  const ScaledTensor in[] = {make_scaled({4}, 0, 27)};
  try {
    apply("conv2d", in, r);
    FAIL() << "conv2d accepted";
  } catch (const NoScaleRule& e) {
    EXPECT_NE(std::string(e.what()).find("'conv2d'"), std::string::npos) << e.what();
  }
  // Known ops dispatch to their rule.
  expect_close(apply("gelu", in, r), values(gelu(in[0])), 0, "apply gelu");
  // Per-row tensors are refused by per-tensor rules, naming the op.
  ScaledTensor rows = quantise_scales(Tensor::from({1, 2, 3, 4}, {2, 2}), Granularity::row);
  try {
    gelu(rows);
    FAIL() << "per-row input accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gelu"), std::string::npos) << e.what();
  }
}

}  // namespace
