// Empirical unit-variance checks: seeded N(0,1) inputs and output
// gradients through float64 reference ops (reference_ops.hpp), with the
// rules' raw scales (constraint none) applied; the output and every input
// gradient must have standard deviation 1 within a bound a wrong scale fails.
//   exact-by-design rules (matmul, linear, embedding, relu, dropout, add,
//   residual, norms, cross-entropy, mse, paper gelu): within 10% (sizes are
//   chosen so that swapping two dimensions or dropping a sqrt is off by >= 2x;
//   the sampling error at these sizes is ~1-3%).
//   library interpolations (gelu/silu/softmax/attention with mult): the
//   library only claims "approximately unit". Measured: gelu/silu 0.97-1.04
//   (bound 6%), softmax over 64 0.80-1.08 and causal attention 1.04-1.06
//   (bound 25%, well inside the [1/2, 2] band `mantissa analyse` checks).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "mantissa/unit/rules.hpp"
#include "reference_ops.hpp"

namespace us = mantissa::unit;
namespace ref = mantissa::ref;
using ref::Vec;

namespace {
const us::Rules kLib{us::RuleSet::library, us::Constraint::none};
const us::Rules kPaper{us::RuleSet::paper, us::Constraint::none};

void expect_unit(const Vec& v, double tol, const char* what) {
  const double s = ref::stddev(v);
  EXPECT_GT(s, 1 - tol) << what;
  EXPECT_LT(s, 1 + tol) << what;
}
void expect_band(const Vec& v, const char* what) { expect_unit(v, 0.25, what); }

template <class F, class G>
void elementwise(const us::Scales& s, F f, G df, double tol, const char* what) {
  std::mt19937_64 rng(11);
  const Vec x = ref::randn(200000, rng), g = ref::randn(200000, rng);
  Vec y(x.size()), dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = s.fwd * f(x[i]);
    dx[i] = s.bwd[0] * df(x[i]) * g[i];
  }
  expect_unit(y, tol, what);
  expect_unit(dx, tol, what);
}
}  // namespace

TEST(UnitEmpirical, Matmul) {
  const int64_t b = 96, m = 384, n = 48;  // distinct so a swapped dimension fails
  std::mt19937_64 rng(1);
  const Vec x = ref::randn(b * m, rng), w = ref::randn(m * n, rng), g = ref::randn(b * n, rng);
  for (const us::Rules& r : {kLib, kPaper}) {
    const us::Scales s = us::matmul(b, m, n, r);
    expect_unit(ref::scaled(ref::matmul(x, w, b, m, n), s.fwd), 0.1, "matmul output");
    const ref::MatmulGrads gr = ref::matmul_backward(x, w, g, b, m, n);
    expect_unit(ref::scaled(gr.dx, s.bwd[0]), 0.1, "matmul grad X");
    expect_unit(ref::scaled(gr.dw, s.bwd[1]), 0.1, "matmul grad W");
  }
}

TEST(UnitEmpirical, LinearAndReadout) {
  const int64_t batch = 80, fi = 320, fo = 40;
  std::mt19937_64 rng(2);
  const Vec x = ref::randn(batch * fi, rng), w = ref::randn(fo * fi, rng), g = ref::randn(batch * fo, rng);
  const us::Scales s = us::linear(fi, fo, batch, kLib);
  expect_unit(ref::scaled(ref::linear(x, w, nullptr, batch, fi, fo), s.fwd), 0.1, "linear output");
  const ref::LinearGrads gr = ref::linear_backward(x, w, g, batch, fi, fo);
  expect_unit(ref::scaled(gr.dx, s.bwd[0]), 0.1, "linear grad X");
  expect_unit(ref::scaled(gr.dw, s.bwd[1]), 0.1, "linear grad W");
  expect_unit(ref::scaled(gr.db, s.bwd[2]), 0.35, "linear grad bias (40 samples)");
  // The library readout's 1/fan_in forward is muP's: output std fan_in^-1/2.
  const us::Scales ro = us::linear_readout(fi, fo, batch, kLib);
  const double out_std = ref::stddev(ref::scaled(ref::linear(x, w, nullptr, batch, fi, fo), ro.fwd));
  EXPECT_NEAR(out_std * std::sqrt(double(fi)), 1.0, 0.1);
}

TEST(UnitEmpirical, Embedding) {
  const int64_t vocab = 64, d = 32, tokens = 8192;
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::vector<int64_t> ids(tokens);
  for (auto& id : ids) id = pick(rng);
  const Vec w = ref::randn(vocab * d, rng), g = ref::randn(tokens * d, rng);
  const us::Scales s = us::embedding(vocab, tokens);
  expect_unit(ref::scaled(ref::embedding(ids, w, d), s.fwd), 0.1, "embedding output");
  expect_unit(ref::scaled(ref::embedding_backward(ids, g, vocab, d), s.bwd[0]), 0.1, "embedding grad W");
}

TEST(UnitEmpirical, ElementwiseExactRules) {
  elementwise(us::relu(kLib), ref::relu, ref::relu_grad, 0.1, "relu");
  // Paper GELU constants are measured values: 3% (they are exact to 0.1%).
  elementwise(
      us::gelu(1.0, kPaper), [](double x) { return ref::gelu(x); }, [](double x) { return ref::gelu_grad(x); }, 0.03,
      "paper gelu");
  const us::Scales d = us::dropout(0.3);
  std::mt19937_64 rng(4);
  std::bernoulli_distribution keep(0.7);
  const Vec x = ref::randn(100000, rng), g = ref::randn(100000, rng);
  Vec y(x.size()), dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double mask = keep(rng) ? 1 / 0.7 : 0.0;
    y[i] = d.fwd * mask * x[i];
    dx[i] = d.bwd[0] * mask * g[i];
  }
  expect_unit(y, 0.1, "dropout output");
  expect_unit(dx, 0.1, "dropout grad");
}

TEST(UnitEmpirical, ElementwiseLibraryInterpolations) {
  for (double mult : {0.5, 1.0, 2.0}) {
    elementwise(
        us::gelu(mult, kLib), [mult](double x) { return ref::gelu(x, mult); },
        [mult](double x) { return ref::gelu_grad(x, mult); }, 0.06, "library gelu");
    elementwise(
        us::silu(mult, kLib), [mult](double x) { return ref::silu(x, mult); },
        [mult](double x) { return ref::silu_grad(x, mult); }, 0.06, "library silu");
  }
}

TEST(UnitEmpirical, Softmax) {
  const int64_t rows = 2000, s = 64;
  std::mt19937_64 rng(5);
  const Vec x = ref::randn(rows * s, rng), g = ref::randn(rows * s, rng);
  for (double mult : {1.0, 2.0}) {
    const us::Scales sc = us::softmax(s, mult, kLib);
    const Vec p = ref::softmax(x, rows, s, mult);
    expect_band(ref::scaled(p, sc.fwd), "softmax output");
    expect_band(ref::scaled(ref::softmax_backward(p, g, rows, s, mult), sc.bwd[0]), "softmax grad");
  }
}

TEST(UnitEmpirical, CausalAttentionOutputAndValueGradient) {
  const int64_t heads = 8, S = 64, D = 32;
  std::mt19937_64 rng(6);
  const Vec q = ref::randn(heads * S * D, rng), k = ref::randn(heads * S * D, rng), v = ref::randn(heads * S * D, rng),
            g = ref::randn(heads * S * D, rng);
  const us::Scales s = us::scaled_dot_product_attention(S, D, true);
  const double c = us::attention_logit_scale(D);
  const ref::AttentionShape shape{heads, S, 1, 1, D};  // each head one causal sequence [S, D]
  const ref::Attention a = ref::attention(q, k, v, shape, c);
  expect_band(ref::scaled(a.out, s.fwd), "attention output");
  const ref::AttentionGrads gr = ref::attention_backward(q, k, v, a.probs, g, shape, c);
  expect_band(ref::scaled(gr.dv, s.bwd[2]), "attention grad V");
  // The library's rule does not target the Q/K gradients: with logits scaled
  // by 1/d_head they are far below unit scale. Pin that so a change shows.
  EXPECT_LT(ref::stddev(ref::scaled(gr.dq, s.bwd[0])), 0.25);
  // Without the log(S) term (the non-causal rule, sqrt(S) instead of
  // sqrt(S / log S)) the causal output comes out about 2x too big.
  const double wrong = us::scaled_dot_product_attention(S, D, false).fwd;
  EXPECT_GT(ref::stddev(ref::scaled(a.out, wrong)), 1.5);
}

TEST(UnitEmpirical, AddAndResidual) {
  const int64_t rows = 1000, cols = 100;
  std::mt19937_64 rng(7);
  const Vec a = ref::randn(rows * cols, rng), b = ref::randn(cols, rng), g = ref::randn(rows * cols, rng);
  const us::Scales s = us::add(rows * cols, cols, rows * cols, kLib);
  Vec y(a.size()), db(static_cast<size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      y[i * cols + j] = s.fwd * (a[i * cols + j] + b[j]);
      db[j] += g[i * cols + j];
    }
  expect_unit(y, 0.1, "add output");
  expect_unit(ref::scaled(g, s.bwd[0]), 0.1, "add grad a");
  expect_unit(ref::scaled(db, s.bwd[1]), 0.25, "add grad broadcast b (100 samples)");
  for (double tau : {0.01, 0.5, 2.0}) {
    const us::ResidualScales r = us::residual(tau);
    // x -> skip * x + branch * f(x), f(x) independent unit (a fresh draw);
    // backward: grad_x = skip * g + branch * grad through the branch (unit).
    const Vec fx = ref::randn(a.size(), rng), gb = ref::randn(a.size(), rng);
    Vec out(a.size()), dx(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      out[i] = r.skip * a[i] + r.branch * fx[i];
      dx[i] = r.skip * g[i] + r.branch * gb[i];
    }
    expect_unit(out, 0.1, "residual output");
    expect_unit(dx, 0.1, "residual grad");
  }
}

TEST(UnitEmpirical, LayerAndRmsNorm) {
  const int64_t rows = 400, d = 96;
  std::mt19937_64 rng(8);
  const Vec x = ref::randn(rows * d, rng), w = ref::randn(d, rng), g = ref::randn(rows * d, rng);
  // Unit weight for the forward check (weights init to 1); the gradient
  // checks use N(0,1) weights as the rules assume unit-scale parameters.
  const Vec ones(static_cast<size_t>(d), 1.0), zeros(static_cast<size_t>(d), 0.0);
  const us::Scales ln = us::layer_norm(d, rows * d);
  expect_unit(ref::layer_norm(x, ones, zeros, rows, d, 1e-5), 0.1, "layer norm output");
  const ref::NormGrads lg = ref::layer_norm_backward(x, w, g, rows, d, 1e-5);
  expect_unit(ref::scaled(lg.dx, ln.bwd[0]), 0.1, "layer norm grad x");
  expect_unit(ref::scaled(lg.dw, ln.bwd[1]), 0.2, "layer norm grad w (96 samples)");
  expect_unit(ref::scaled(lg.db, ln.bwd[2]), 0.2, "layer norm grad b (96 samples)");
  const us::Scales rn = us::rms_norm(d, rows * d);
  expect_unit(ref::rms_norm(x, ones, rows, d, 1e-5), 0.1, "rms norm output");
  const ref::NormGrads rg = ref::rms_norm_backward(x, w, g, rows, d, 1e-5);
  expect_unit(ref::scaled(rg.dx, rn.bwd[0]), 0.1, "rms norm grad x");
  expect_unit(ref::scaled(rg.dw, rn.bwd[1]), 0.2, "rms norm grad w (96 samples)");
}

TEST(UnitEmpirical, CrossEntropyAndMse) {
  const int64_t rows = 512, V = 256;
  std::mt19937_64 rng(9);
  const Vec z = ref::randn(rows * V, rng);
  std::uniform_int_distribution<int64_t> pick(0, V - 1);
  std::vector<int64_t> t(rows);
  for (auto& id : t) id = pick(rng);
  const us::LossScales ce = us::cross_entropy(V, rows);
  const ref::Loss l = ref::cross_entropy_sum(ref::scaled(z, ce.input_fwd), t, rows, V);
  expect_unit(ref::scaled(l.dz, ce.bwd[0]), 0.1, "cross-entropy grad logits");
  // Mean reduction is forward-only: the loss is the per-row mean (~log V + 1/2).
  EXPECT_NEAR(l.loss * ce.mean_scale, std::log(double(V)) + 0.5, 0.1);
  const us::LossScales m = us::mse(100000);
  const Vec x = ref::randn(100000, rng), y = ref::randn(100000, rng);
  Vec dx(x.size()), dy(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    dx[i] = m.bwd[0] * 2 * (x[i] - y[i]);
    dy[i] = m.bwd[1] * -2 * (x[i] - y[i]);
  }
  expect_unit(dx, 0.1, "mse grad input");
  expect_unit(dy, 0.1, "mse grad target");
}
