// The scale-propagation rules of the ops outside the core set of test_propagate.cpp (RMS norm, SiLU,
// SwiGLU, rotary, causal / key-padded attention over separate q, k, v with
// grouped kv heads, the sum of embedding tables) against float64
// recomputations on the values data x scale, at unit scale and at 2^-20 and
// 2^20: the result equals the unscaled op's, the data stays inside FP8
// E4M3's range (|data| <= 448, RMS not below 2^-4), and the scale is the
// scale_rule the `propagate` quantiser follows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "mantissa/autograd/ops_rotary.hpp"
#include "mantissa/scalify/propagate.hpp"
#include "reference_ops.hpp"
#include "scaled_tensors.hpp"

using namespace mantissa;
using namespace mantissa::scalify;
using ref::Vec;

namespace {

constexpr float kE4m3Max = 448.0f;

using test::expect_close;
using test::make_scaled;
using test::values;

// The data a cast would store: inside E4M3's range and not collapsed towards its subnormals.
void expect_in_range(const ScaledTensor& x, const std::string& what) {
  const auto d = x.data.to_vector();
  double ss = 0, mx = 0;
  for (float v : d) ss += static_cast<double>(v) * v, mx = std::max(mx, std::abs(static_cast<double>(v)));
  const double rms = std::sqrt(ss / static_cast<double>(d.size()));
  EXPECT_LE(mx, kE4m3Max) << what;
  EXPECT_GE(rms, 1.0 / 16) << what;
  EXPECT_LE(rms, 4.0) << what;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

Tensor ids_of(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

TEST(PropagateOps, RmsNormRemovesTheInputScaleAndTakesTheGains) {
  const int64_t R = 6, C = 48;
  // The rule assumes the input's RMS is above sqrt(eps) (as the layer-norm rule does); below
  // it the op's own output shrinks by rms / sqrt(eps). So at 2^-20 eps is below the values' square.
  struct Case {
    int e;
    double eps;
  };
  for (const auto [e, eps] : {Case{0, 1e-6}, Case{20, 1e-6}, Case{-20, 0x1p-60}}) {
    const std::string at = "x at 2^" + std::to_string(e);
    const auto x = make_scaled({R, C}, e, 101), w = make_scaled({C}, -1, 102), dy = make_scaled({R, C}, -12, 103);
    const auto y = rms_norm(x, w, eps);
    EXPECT_EQ(y.scale(), 0.5f) << at;
    expect_close(y, ref::rms_norm(values(x), values(w), R, C, eps), 1e-6, "rms_norm, " + at);
    expect_in_range(y, "rms_norm, " + at);
    const auto dx = rms_norm_backward(x, w, dy, eps);
    EXPECT_EQ(dx.scale(), std::ldexp(1.0f, -12 - 1 - e)) << at;
    expect_close(dx, ref::rms_norm_backward(values(x), values(w), values(dy), R, C, eps).dx, 1e-5,
                 "rms_norm_backward, " + at);
    expect_in_range(dx, "rms_norm_backward, " + at);
  }
  // Values far below sqrt(eps): eps acts on the values, not on the data.
  const auto tiny = make_scaled({R, C}, -20, 104, 0.01), w = make_scaled({C}, 0, 105);
  expect_close(rms_norm(tiny, w, 1e-6), ref::rms_norm(values(tiny), values(w), R, C, 1e-6), 1e-6, "rms_norm, eps");
}

TEST(PropagateOps, SiluAndSwigluMultiplyTheGateAndUpScales) {
  const int64_t N = 400;
  for (const int e : {0, -20, 20}) {
    const std::string at = "gate at 2^" + std::to_string(e);
    const auto g = make_scaled({N}, e, 111), u = make_scaled({N}, -e / 2 - 3, 112), dy = make_scaled({N}, -9, 113);
    const Vec vg = values(g), vu = values(u), vdy = values(dy);
    Vec s, f, d_gate, d_up, d_silu;
    for (size_t i = 0; i < vg.size(); ++i) {
      const double h = 1e-6 * std::max(1.0, std::abs(vg[i]));
      const double fd = ((vg[i] + h) * sigmoid(vg[i] + h) - (vg[i] - h) * sigmoid(vg[i] - h)) / (2 * h);
      s.push_back(vg[i] * sigmoid(vg[i]));
      f.push_back(s.back() * vu[i]);
      d_up.push_back(vdy[i] * s.back());
      d_gate.push_back(vdy[i] * vu[i] * fd);
      d_silu.push_back(vdy[i] * fd);
    }
    EXPECT_EQ(silu(g).scale(), g.scale()) << at;
    expect_close(silu(g), s, 1e-6, "silu, " + at);
    expect_in_range(silu(g), "silu, " + at);
    EXPECT_EQ(silu_backward(g, dy).scale(), dy.scale()) << at;
    expect_close(silu_backward(g, dy), d_silu, 1e-6, "silu_backward, " + at);
    const auto y = swiglu(g, u);
    EXPECT_EQ(y.scale(), g.scale() * u.scale()) << at;
    expect_close(y, f, 1e-6, "swiglu, " + at);
    expect_in_range(y, "swiglu, " + at);
    const auto [dg, du] = swiglu_backward(g, u, dy);
    EXPECT_EQ(dg.scale(), dy.scale() * u.scale()) << at;
    EXPECT_EQ(du.scale(), dy.scale() * g.scale()) << at;
    expect_close(dg, d_gate, 1e-6, "swiglu_backward gate, " + at);
    expect_close(du, d_up, 1e-6, "swiglu_backward up, " + at);
    expect_in_range(dg, "swiglu_backward gate, " + at);
    expect_in_range(du, "swiglu_backward up, " + at);
  }
}

// Against the engine's own rotary op (autograd::rotary_qkv, written separately) on the values.
TEST(PropagateOps, RotaryRotatesTheDataAndKeepsTheScale) {
  const int64_t B = 2, T = 9, H = 2, D = 8, C = H * D;
  const double theta = 10000.0;
  for (const int e : {0, -20, 20}) {
    const std::string at = "x at 2^" + std::to_string(e);
    const auto x = make_scaled({B, T, C}, e, 121);
    const auto y = rotary(x, H, theta);
    EXPECT_EQ(y.scale(), x.scale()) << at;
    expect_in_range(y, "rotary, " + at);
    autograd::Tape t;
    const Tensor vx = Tensor::from(x.values(), {B, T, C});
    const autograd::Var xv = t.constant(vx);
    const Tensor qkv = autograd::rotary_qkv(t, xv, xv, xv, H, H, theta).value;  // [B, T, 3C]: q, k rotated, v not
    Vec want(static_cast<size_t>(B * T * C));
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t c = 0; c < C; ++c) want[static_cast<size_t>(r * C + c)] = qkv.f32()[r * 3 * C + c];
    expect_close(y, want, 1e-6, "rotary, " + at);
    // Each (i, i + D/2) pair keeps its length; the inverse rotation gives x back.
    const Vec vy = values(y), v0 = values(x);
    for (int64_t r = 0; r < B * T * H; ++r)
      for (int64_t i = 0; i < D / 2; ++i) {
        const auto a = static_cast<size_t>(r * D + i), b = a + static_cast<size_t>(D / 2);
        EXPECT_NEAR(std::hypot(vy[a], vy[b]), std::hypot(v0[a], v0[b]), 1e-6 * std::hypot(v0[a], v0[b]) + 1e-300);
      }
    expect_close(rotary(y, H, theta, true), v0, 1e-6, "rotary inverse, " + at);
  }
}

TEST(PropagateOps, CausalAndKeyPaddedAttentionTakeTheScaleOfV) {
  const int64_t B = 2, T = 7, H = 4, KV = 2, D = 4;
  std::vector<int32_t> lens = {7, 3};
  const Tensor key_len = ids_of(lens);
  struct Case {
    int q, k, v;
  };
  // Unit scales; scores near zero (q, k at 2^-20) and saturated (2^2 each, D = 4) with v far off.
  for (const Case c : {Case{0, 0, 0}, Case{-20, -20, 20}, Case{2, 2, -20}, Case{20, -20, 0}}) {
    const std::string at = "q, k, v at 2^" + std::to_string(c.q) + ", 2^" + std::to_string(c.k) + ", 2^" + std::to_string(c.v);
    const auto q = make_scaled({B, T, H * D}, c.q, 131), k = make_scaled({B, T, KV * D}, c.k, 132),
               v = make_scaled({B, T, KV * D}, c.v, 133);
    for (const bool padded : {false, true}) {
      const auto out = attention(q, k, v, H, padded ? &key_len : nullptr);
      EXPECT_EQ(out.scale(), v.scale()) << at;
      EXPECT_EQ(out.scale(), static_cast<float>(scale_rule::attention(v.scale())));
      const Vec want = ref::attention(values(q), values(k), values(v), {B, T, H, KV, D},
                                      1 / std::sqrt(static_cast<double>(D)), padded ? lens : std::vector<int32_t>{})
                           .out;
      expect_close(out, want, 1e-6, std::string(padded ? "key-padded" : "causal") + " attention, " + at);
      // A convex combination of v's rows: never above v's largest data.
      const auto dv = v.data.to_vector(), d = out.data.to_vector();
      double vmax = 0, omax = 0;
      for (float z : dv) vmax = std::max(vmax, std::abs(static_cast<double>(z)));
      for (float z : d) omax = std::max(omax, std::abs(static_cast<double>(z)));
      EXPECT_LE(omax, vmax * (1 + 1e-6)) << at;
    }
  }
}

// d(q), d(k), d(v) of attention in float64 (reference_ops.hpp, one kv head per query head)
// with q, k, v at different scales, each divided by its rule's scale: the largest entry stays
// within [1/2, 8] (measured 1.3 - 4.3); a rule that left out v's scale (2^3) or the other
// operand's (q at 2^-3) would miss by those factors.
TEST(PropagateOps, AttentionBackwardRulesBoundEachGradient) {
  const int64_t S = 16, D = 16;
  struct Case {
    int q, k, v, g;
  };
  for (const Case c : {Case{0, 0, 0, 0}, Case{1, -2, 3, -4}, Case{-3, 1, -5, 6}}) {
    const std::string at = "q, k, v, dO at 2^" + std::to_string(c.q) + ", " + std::to_string(c.k) + ", " +
                           std::to_string(c.v) + ", " + std::to_string(c.g);
    const Vec q = values(make_scaled({S, D}, c.q, 141)), k = values(make_scaled({S, D}, c.k, 142)),
              v = values(make_scaled({S, D}, c.v, 143)), g = values(make_scaled({S, D}, c.g, 144));
    const double sc = 1.0 / std::sqrt(static_cast<double>(D));
    const auto fwd = ref::attention(q, k, v, {1, S, 1, 1, D}, sc);
    const auto grads = ref::attention_backward(q, k, v, fwd.probs, g, {1, S, 1, 1, D}, sc);
    auto largest = [](const Vec& x) {
      double m = 0;
      for (double z : x) m = std::max(m, std::abs(z));
      return m;
    };
    const double sq = std::ldexp(1.0, c.q), sk = std::ldexp(1.0, c.k), sv = std::ldexp(1.0, c.v), sg = std::ldexp(1.0, c.g);
    const double rq = largest(grads.dq) / scale_rule::attention_backward_score(sg, sv, sk, 1.0),
                 rk = largest(grads.dk) / scale_rule::attention_backward_score(sg, sv, sq, 1.0),
                 rv = largest(grads.dv) / scale_rule::attention_backward_value(sg, 1.0);
    std::printf("%s: max |dQ| / rule %.3f, |dK| / rule %.3f, |dV| / rule %.3f\n", at.c_str(), rq, rk, rv);
    for (const double r : {rq, rk, rv}) {
      EXPECT_LE(r, 8.0) << at;
      EXPECT_GE(r, 0.5) << at;
    }
  }
}

TEST(PropagateOps, EmbeddingSumJoinsTheTablesByTheAddRule) {
  Pow2Rounder down;
  const int64_t N = 12, C = 16;
  std::vector<int32_t> a(N), b(N), p(N);
  for (int64_t i = 0; i < N; ++i) a[i] = static_cast<int32_t>((i * 7) % 30), b[i] = static_cast<int32_t>(i % 2), p[i] = static_cast<int32_t>(i);
  const Tensor ids[] = {ids_of(a), ids_of(b), ids_of(p)};
  struct Case {
    int word, type, pos, want;
  };
  // floor(log2 sqrt(sum 2^2e)): 3 unit tables -> 2^0; 2^20 dominates; 2^-20 and 2^-19 -> 2^-19.
  for (const Case c : {Case{0, 0, 0, 0}, Case{20, -20, 0, 20}, Case{-20, -20, -19, -19}, Case{-3, 2, 2, 2}}) {
    const std::string at = "tables at 2^" + std::to_string(c.word) + ", " + std::to_string(c.type) + ", " + std::to_string(c.pos);
    const ScaledTensor tables[] = {make_scaled({30, C}, c.word, 151), make_scaled({2, C}, c.type, 152),
                                   make_scaled({N, C}, c.pos, 153)};
    Vec want(static_cast<size_t>(N * C), 0.0);
    for (int t = 0; t < 3; ++t) {
      const Vec w = values(tables[t]);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < C; ++j) want[static_cast<size_t>(n * C + j)] += w[static_cast<size_t>(ids[t].data<int32_t>()[n] * C + j)];
    }
    const auto y = embedding_sum(ids, tables, down);
    EXPECT_EQ(y.scale(), std::ldexp(1.0f, c.want)) << at;
    const double s[] = {tables[0].scale(), tables[1].scale(), tables[2].scale()};
    EXPECT_EQ(y.scale(), static_cast<float>(scale_rule::embedding_sum(s, down))) << at;
    expect_close(y, want, 1e-6, "embedding_sum, " + at);
    expect_in_range(y, "embedding_sum, " + at);
  }
  // A zero table (the unit BERT's segment table at initialisation) is any scale: it drops out.
  ScaledTensor zero = make_scaled({2, C}, 5, 154);
  zero.data.fill(0.0f);
  const ScaledTensor tables[] = {make_scaled({30, C}, -4, 155), zero, make_scaled({N, C}, -4, 156)};
  EXPECT_EQ(embedding_sum(ids, tables, down).scale(), std::ldexp(1.0f, -4));
  const double one[] = {0.25, 0.0};
  EXPECT_EQ(scale_rule::embedding_sum(one, down), 0.25);
}

// The rules on scales alone, as the quantiser reads them, and the fused GPT attention rule as
// the larger of the separate ones.
TEST(ScaleRuleOps, FormulasAndTheTensorRulesAgree) {
  EXPECT_EQ(scale_rule::rms_norm(0.25), 0.25);
  EXPECT_EQ(scale_rule::swiglu(0.25, 0.5), 0.125);
  EXPECT_EQ(scale_rule::swiglu_backward_up(2.0, 0.25), 0.5);
  EXPECT_EQ(scale_rule::swiglu_backward_gate(2.0, 0.125), 0.25);
  EXPECT_EQ(scale_rule::rotary(8.0), 8.0);
  EXPECT_EQ(scale_rule::attention(0.5), 0.5);
  EXPECT_EQ(scale_rule::attention_backward_value(0.25, 2.0), 0.5);
  EXPECT_EQ(scale_rule::attention_backward_score(0.25, 4.0, 0.5, 1.0), 0.5);
  for (const double s : {0.125, 1.0, 4.0})
    EXPECT_EQ(scale_rule::causal_attention_backward(0.5, s), 0.5 * std::max(1.0, s * s));
  const auto x = make_scaled({3, 16}, 3, 161), w = make_scaled({16}, -2, 162), u = make_scaled({3, 16}, -1, 163);
  EXPECT_EQ(rms_norm(x, w, 1e-6).scale(), static_cast<float>(scale_rule::rms_norm(w.scale())));
  EXPECT_EQ(swiglu(x, u).scale(), static_cast<float>(scale_rule::swiglu(x.scale(), u.scale())));
  EXPECT_EQ(silu(x).scale(), static_cast<float>(scale_rule::silu(x.scale())));
  Pow2Rounder down;
  const ScaledTensor in[] = {x, u};
  EXPECT_EQ(apply("swiglu", in, down).scale(), swiglu(x, u).scale());
}

TEST(PropagateOps, BadShapesAreErrorsNamingTheOp) {
  const auto x = make_scaled({2, 3, 6}, 0, 171), w = make_scaled({5}, 0, 172);
  EXPECT_THROW(rms_norm(x, w, 1e-6), std::invalid_argument);
  EXPECT_THROW(rotary(x, 2, 1e4), std::invalid_argument);  // D = 3 is odd
  EXPECT_THROW(swiglu(x, w), std::invalid_argument);
  try {
    attention(x, make_scaled({2, 3, 4}, 0, 173), make_scaled({2, 3, 4}, 0, 174), 3, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("attention"), std::string::npos) << e.what();
  }
}

}  // namespace
