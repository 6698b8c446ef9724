// mantissa's library rule set against Graphcore unit-scaling 0.3.5: for each
// golden case (tests/golden/unit_scaling/*.json, made by make_golden.py in
// float64), our scales applied to the float64 reference op must reproduce the
// package's output and input gradients to ~1e-12 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "mantissa/unit/rules.hpp"
#include "reference_ops.hpp"

namespace us = mantissa::unit;
namespace ref = mantissa::ref;
using nlohmann::json;
using ref::Vec;

namespace {
const std::filesystem::path kDir = std::filesystem::path(MANTISSA_SOURCE_DIR) / "tests/golden/unit_scaling";

json load(const std::filesystem::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}
Vec data(const json& t) { return t.at("data").get<Vec>(); }
std::vector<int64_t> shape(const json& t) { return t.at("shape").get<std::vector<int64_t>>(); }
int64_t numel(const json& t) {
  int64_t n = 1;
  for (int64_t d : shape(t)) n *= d;
  return n;
}

void expect_close(const Vec& ours, const json& golden, const std::string& what, double rel = 1e-12) {
  const Vec g = data(golden);
  ASSERT_EQ(ours.size(), g.size()) << what;
  double scale = 0, err = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    scale = std::max(scale, std::fabs(g[i]));
    err = std::max(err, std::fabs(ours[i] - g[i]));
  }
  EXPECT_LE(err, rel * std::max(scale, 1e-300)) << what << ": max error " << err << " vs max |golden| " << scale;
}

us::Rules rules(const json& params) {
  us::Rules r{us::RuleSet::library, std::nullopt};
  if (params.contains("constraint")) r.constraint = us::parse_constraint(params["constraint"].get<std::string>());
  return r;
}

template <class F, class G>
void check_elementwise(const json& c, const us::Scales& s, F f, G df, const std::string& what) {
  const Vec x = data(c["inputs"]["input"]), g = data(c["grad_output"]);
  Vec y(x.size()), dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = s.fwd * f(x[i]);
    dx[i] = s.bwd[0] * df(x[i]) * g[i];
  }
  expect_close(y, c["output"], what + " output");
  expect_close(dx, c["grads"]["input"], what + " grad input");
}

// Runs one golden case; returns false for an op this test does not know.
bool check_case(const json& c, const std::string& what) {
  const std::string op = c["op"];
  const json& in = c["inputs"];
  const json& p = c["params"];
  const Vec g = data(c["grad_output"]);
  if (op == "matmul") {
    const auto ls = shape(in["left"]), rs = shape(in["right"]);
    const int64_t b = ls[0], m = ls[1], n = rs[1];
    const us::Scales s = us::matmul(b, m, n, rules(p));
    const Vec x = data(in["left"]), w = data(in["right"]);
    expect_close(ref::scaled(ref::matmul(x, w, b, m, n), s.fwd), c["output"], what);
    const ref::MatmulGrads gr = ref::matmul_backward(x, w, g, b, m, n);
    expect_close(ref::scaled(gr.dx, s.bwd[0]), c["grads"]["left"], what + " grad left");
    expect_close(ref::scaled(gr.dw, s.bwd[1]), c["grads"]["right"], what + " grad right");
  } else if (op == "linear" || op == "linear_readout") {
    const auto ws = shape(in["weight"]);
    const int64_t fo = ws[0], fi = ws[1], batch = numel(in["input"]) / fi;
    const us::Scales s = op == "linear" ? us::linear(fi, fo, batch, rules(p)) : us::linear_readout(fi, fo, batch, rules(p));
    const Vec x = data(in["input"]), w = data(in["weight"]);
    const bool has_bias = in.contains("bias");
    const Vec bias = has_bias ? ref::scaled(data(in["bias"]), 1.0) : Vec{};
    expect_close(ref::scaled(ref::linear(x, w, has_bias ? &bias : nullptr, batch, fi, fo), s.fwd), c["output"], what);
    const ref::LinearGrads gr = ref::linear_backward(x, w, g, batch, fi, fo);
    expect_close(ref::scaled(gr.dx, s.bwd[0]), c["grads"]["input"], what + " grad input");
    expect_close(ref::scaled(gr.dw, s.bwd[1]), c["grads"]["weight"], what + " grad weight");
    if (has_bias) expect_close(ref::scaled(gr.db, s.bwd[2]), c["grads"]["bias"], what + " grad bias");
  } else if (op == "embedding") {
    const auto ids = c["int_inputs"]["ids"]["data"].get<std::vector<int64_t>>();
    const auto ws = shape(in["weight"]);
    const us::Scales s = us::embedding(ws[0], static_cast<int64_t>(ids.size()));
    expect_close(ref::scaled(ref::embedding(ids, data(in["weight"]), ws[1]), s.fwd), c["output"], what);
    expect_close(ref::scaled(ref::embedding_backward(ids, g, ws[0], ws[1]), s.bwd[0]), c["grads"]["weight"], what + " grad");
  } else if (op == "gelu" || op == "silu") {
    const double m = p["mult"];
    if (op == "gelu")
      check_elementwise(c, us::gelu(m, rules(p)), [m](double x) { return ref::gelu(x, m); },
                        [m](double x) { return ref::gelu_grad(x, m); }, what);
    else
      check_elementwise(c, us::silu(m, rules(p)), [m](double x) { return ref::silu(x, m); },
                        [m](double x) { return ref::silu_grad(x, m); }, what);
  } else if (op == "softmax") {
    const auto xs = shape(in["input"]);
    const double m = p["mult"];
    const us::Scales s = us::softmax(xs[1], m, rules(p));
    const Vec prob = ref::softmax(data(in["input"]), xs[0], xs[1], m);
    expect_close(ref::scaled(prob, s.fwd), c["output"], what);
    expect_close(ref::scaled(ref::softmax_backward(prob, g, xs[0], xs[1], m), s.bwd[0]), c["grads"]["input"], what + " grad");
  } else if (op == "scaled_dot_product_attention") {
    const auto qs = shape(in["query"]);
    const int64_t heads = qs[0], S = qs[1], D = qs[2];
    const bool causal = p["causal"];
    const double m = p["mult"];
    const us::Scales s = us::scaled_dot_product_attention(S, D, causal, m);
    const double lc = us::attention_logit_scale(D, m);
    const Vec q = data(in["query"]), k = data(in["key"]), v = data(in["value"]);
    // each head one sequence [S, D]; not causal: every key attended (no padding)
    const ref::AttentionShape shape{heads, S, 1, 1, D};
    const std::vector<int32_t> keys = causal ? std::vector<int32_t>{} : std::vector<int32_t>(heads, static_cast<int32_t>(S));
    const ref::Attention a = ref::attention(q, k, v, shape, lc, keys);
    expect_close(ref::scaled(a.out, s.fwd), c["output"], what);
    const ref::AttentionGrads gr = ref::attention_backward(q, k, v, a.probs, g, shape, lc, keys);
    expect_close(ref::scaled(gr.dq, s.bwd[0]), c["grads"]["query"], what + " grad q");
    expect_close(ref::scaled(gr.dk, s.bwd[1]), c["grads"]["key"], what + " grad k");
    expect_close(ref::scaled(gr.dv, s.bwd[2]), c["grads"]["value"], what + " grad v");
  } else if (op == "dropout") {
    const double pd = p["p"];
    const us::Scales s = us::dropout(pd);
    const Vec x = data(in["input"]), out = data(c["output"]);
    Vec y(x.size()), dx(x.size());
    int dropped = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double mask = out[i] != 0 ? 1 / (1 - pd) : 0.0;  // the package's mask, read off its output
      dropped += out[i] == 0;
      y[i] = s.fwd * mask * x[i];
      dx[i] = s.bwd[0] * mask * g[i];
    }
    EXPECT_GT(dropped, 0) << what;
    expect_close(y, c["output"], what);
    expect_close(dx, c["grads"]["input"], what + " grad");
  } else if (op == "add") {
    const int64_t na = numel(in["a"]), nb = numel(in["b"]);
    const us::Scales s = us::add(na, nb, na, rules(p));
    const Vec a = data(in["a"]), b = data(in["b"]);
    Vec y(a.size()), db(b.size(), 0.0);
    for (size_t i = 0; i < a.size(); ++i) {
      y[i] = s.fwd * (a[i] + b[i % b.size()]);
      db[i % b.size()] += g[i];
    }
    expect_close(y, c["output"], what);
    expect_close(ref::scaled(g, s.bwd[0]), c["grads"]["a"], what + " grad a");
    expect_close(ref::scaled(db, s.bwd[1]), c["grads"]["b"], what + " grad b");
  } else if (op == "residual") {
    const us::ResidualScales r = us::residual(p["tau"].get<double>());
    const Vec x = data(in["input"]);
    Vec y(x.size()), dx(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      y[i] = r.branch * x[i] * x[i] + r.skip * x[i];       // branch f(x) = x^2
      dx[i] = r.skip * g[i] + r.branch * 2 * x[i] * g[i];  // split's backward scales
    }
    expect_close(y, c["output"], what);
    expect_close(dx, c["grads"]["input"], what + " grad");
  } else if (op == "layer_norm" || op == "rms_norm") {
    const int64_t d = numel(in["weight"]), n = numel(in["input"]), rows = n / d;
    const double eps = p["eps"];
    const Vec x = data(in["input"]), w = data(in["weight"]);
    if (op == "layer_norm") {
      const us::Scales s = us::layer_norm(d, n);
      expect_close(ref::layer_norm(x, w, data(in["bias"]), rows, d, eps), c["output"], what);
      const ref::NormGrads gr = ref::layer_norm_backward(x, w, g, rows, d, eps);
      expect_close(ref::scaled(gr.dx, s.bwd[0]), c["grads"]["input"], what + " grad x");
      expect_close(ref::scaled(gr.dw, s.bwd[1]), c["grads"]["weight"], what + " grad w");
      expect_close(ref::scaled(gr.db, s.bwd[2]), c["grads"]["bias"], what + " grad b");
    } else {
      // The package computes the RMS in float32 (core.functional.rms casts
      // with x.float()), so only ~1e-7 agreement is possible here.
      const double rel = 2e-6;
      const us::Scales s = us::rms_norm(d, n);
      expect_close(ref::rms_norm(x, w, rows, d, eps), c["output"], what, rel);
      const ref::NormGrads gr = ref::rms_norm_backward(x, w, g, rows, d, eps);
      expect_close(ref::scaled(gr.dx, s.bwd[0]), c["grads"]["input"], what + " grad x", rel);
      expect_close(ref::scaled(gr.dw, s.bwd[1]), c["grads"]["weight"], what + " grad w", rel);
    }
  } else if (op == "cross_entropy") {
    const auto zs = shape(in["input"]);
    const auto t = c["int_inputs"]["targets"]["data"].get<std::vector<int64_t>>();
    const bool mean = p["reduction"] == "mean";
    const us::LossScales s = us::cross_entropy(zs[1], zs[0], p["mult"].get<double>(), mean);
    const ref::Loss l = ref::cross_entropy_sum(ref::scaled(data(in["input"]), s.input_fwd), t, zs[0], zs[1]);
    expect_close({l.loss * s.mean_scale}, c["output"], what);
    expect_close(ref::scaled(l.dz, s.bwd[0] * g[0]), c["grads"]["input"], what + " grad");
  } else if (op == "mse") {
    const Vec x = data(in["input"]), t = data(in["target"]);
    const us::LossScales s = us::mse(static_cast<int64_t>(x.size()), p["reduction"] == "mean");
    double loss = 0;
    Vec dx(x.size()), dt(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      loss += (x[i] - t[i]) * (x[i] - t[i]);
      dx[i] = s.bwd[0] * 2 * (x[i] - t[i]) * g[0];
      dt[i] = s.bwd[1] * -2 * (x[i] - t[i]) * g[0];
    }
    expect_close({loss * s.mean_scale}, c["output"], what);
    expect_close(dx, c["grads"]["input"], what + " grad input");
    expect_close(dt, c["grads"]["target"], what + " grad target");
  } else {
    return false;
  }
  return true;
}
}  // namespace

TEST(UnitGolden, EveryOpMatchesUnitScalingPackage) {
  ASSERT_TRUE(std::filesystem::is_directory(kDir)) << kDir;
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    const auto& path = entry.path();
    if (path.extension() != ".json" || path.stem() == "optim") continue;
    const json c = load(path);
    SCOPED_TRACE(path.filename().string());
    EXPECT_TRUE(check_case(c, path.stem().string())) << "unknown op " << c["op"];
    ++checked;
  }
  // 48 cases cover all 15 ops; fewer means goldens went missing.
  EXPECT_GE(checked, 48);
}

TEST(UnitGolden, OptimizerRulesMatchUnitScalingPackage) {
  const json o = load(kDir / "optim.json");
  int checked = 0;
  for (const json& c : o["lr"]) {
    const auto opt = c["optimizer"] == "adam" ? us::OptimizerKind::adam : us::OptimizerKind::sgd;
    const auto role = us::parse_param_role(c["role"].get<std::string>());
    const auto shp = c["shape"].get<std::vector<int64_t>>();
    const std::optional<int> depth = c["depth"].is_null() ? std::nullopt : std::optional<int>(c["depth"].get<int>());
    const auto readout = us::parse_constraint(c["readout_constraint"].get<std::string>());
    const double lr = us::lr_scale(opt, role, shp, depth, readout);
    EXPECT_NEAR(lr, c["lr_scale"].get<double>(), 1e-14 * lr) << c.dump();
    EXPECT_NEAR(us::independent_weight_decay(0.1, lr), c["weight_decay"].get<double>(), 1e-13 * (0.1 / lr)) << c.dump();
    ++checked;
  }
  EXPECT_EQ(checked, 21);
  for (const json& t : o["transformer_residual"]) {
    const auto taus = t["tau"].get<Vec>();
    for (size_t i = 0; i < taus.size(); ++i)
      EXPECT_NEAR(us::transformer_residual_tau(static_cast<int>(i), t["layers"].get<int>(), t["residual_mult"].get<double>(),
                                               t["attn_ratio"].get<double>()),
                  taus[i], 1e-15);
  }
  EXPECT_EQ(us::auto_residual_tau(true), o["auto_tau"]["self_attention"].get<double>());
  EXPECT_EQ(us::auto_residual_tau(false), o["auto_tau"]["other"].get<double>());
}
