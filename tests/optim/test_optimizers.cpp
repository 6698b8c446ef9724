// Optimizer updates against a float64 re-implementation of PyTorch's update
// formulas (torch/optim/{sgd,adam,adamw}.py, single-tensor path), written
// here independently of src/optim, plus hand-computed first steps.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "mantissa/optim/optimizer.hpp"
#include "optim/random_parameter.hpp"

using mantissa::DType;
using mantissa::MemoryKind;
using mantissa::Tensor;
using mantissa::autograd::Parameter;
namespace optim = mantissa::optim;

namespace {

struct Params {
  std::vector<Parameter> storage;
  std::vector<Parameter*> ptrs() {
    std::vector<Parameter*> out;
    for (auto& p : storage) out.push_back(&p);
    return out;
  }
};

// Sizes straddle the optimizer's chunk size (16384) so chunk edges are covered;
// one parameter has tiny gradients so that the placement of eps matters.
Params make_params(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Params ps;
  const std::vector<std::pair<std::string, mantissa::Shape>> specs = {
      {"w.big", {3, 16384 + 5}}, {"b.small", {7}}, {"w.tiny_grad", {64}}, {"ln.gain", {33}}};
  for (const auto& [name, shape] : specs) {
    ps.storage.push_back(mantissa::optim_test::random_parameter(name, shape, rng, nd));
  }
  return ps;
}

// Deterministic gradients for step k: different every step and parameter.
void set_grads(Params& ps, int k) {
  for (size_t j = 0; j < ps.storage.size(); ++j) {
    Parameter& p = ps.storage[j];
    const double mag = p.name == "w.tiny_grad" ? 3e-8 : 1.0;
    for (int64_t i = 0; i < p.grad.numel(); ++i)
      p.grad.f32()[i] = static_cast<float>(mag * std::sin(0.37 * static_cast<double>(i) + 1.3 * k + 0.7 * static_cast<double>(j)));
  }
}

struct RefParam {
  std::vector<double> p, m, v, buf;
};

std::vector<RefParam> ref_from(const Params& ps) {
  std::vector<RefParam> r;
  for (const auto& p : ps.storage) {
    RefParam q;
    for (int64_t i = 0; i < p.value.numel(); ++i) q.p.push_back(p.value.f32()[i]);
    q.m.assign(q.p.size(), 0.0);
    q.v.assign(q.p.size(), 0.0);
    q.buf.assign(q.p.size(), 0.0);
    r.push_back(q);
  }
  return r;
}

// torch.optim.Adam / AdamW, float64.
void ref_adam_step(std::vector<RefParam>& r, const Params& ps, const std::vector<double>& mult, double lr,
                   int t, const optim::OptimizerConfig& c, bool decoupled) {
  for (size_t j = 0; j < r.size(); ++j) {
    const double plr = lr * mult[j];
    const double wd = ps.storage[j].decay ? c.weight_decay : 0.0;
    const double bc1 = 1.0 - std::pow(c.beta1, t), bc2 = 1.0 - std::pow(c.beta2, t);
    for (size_t i = 0; i < r[j].p.size(); ++i) {
      double g = ps.storage[j].grad.f32()[i];
      double& p = r[j].p[i];
      if (decoupled) p *= 1.0 - plr * wd;
      else g += wd * p;
      r[j].m[i] = c.beta1 * r[j].m[i] + (1.0 - c.beta1) * g;
      r[j].v[i] = c.beta2 * r[j].v[i] + (1.0 - c.beta2) * g * g;
      const double denom = std::sqrt(r[j].v[i]) / std::sqrt(bc2) + c.eps;
      p -= plr / bc1 * r[j].m[i] / denom;
    }
  }
}

// torch.optim.SGD, float64.
void ref_sgd_step(std::vector<RefParam>& r, const Params& ps, const std::vector<double>& mult, double lr,
                  bool first, const optim::OptimizerConfig& c) {
  for (size_t j = 0; j < r.size(); ++j) {
    const double wd = ps.storage[j].decay ? c.weight_decay : 0.0;
    for (size_t i = 0; i < r[j].p.size(); ++i) {
      double d = ps.storage[j].grad.f32()[i] + wd * r[j].p[i];
      if (c.momentum != 0) {
        r[j].buf[i] = first ? d : c.momentum * r[j].buf[i] + (1.0 - c.dampening) * d;
        d = c.nesterov ? d + c.momentum * r[j].buf[i] : r[j].buf[i];
      }
      r[j].p[i] -= lr * mult[j] * d;
    }
  }
}

// Largest |ours - ref| / (|ref| + 1), over every element.
double max_rel_err(const Params& ps, const std::vector<RefParam>& r) {
  double worst = 0;
  for (size_t j = 0; j < r.size(); ++j)
    for (size_t i = 0; i < r[j].p.size(); ++i)
      worst = std::max(worst, std::abs(ps.storage[j].value.f32()[i] - r[j].p[i]) / (std::abs(r[j].p[i]) + 1.0));
  return worst;
}

std::vector<double> multipliers(optim::Optimizer& opt) {
  opt.set_lr_multipliers([](const Parameter& p) { return p.name == "ln.gain" ? 0.5 : (p.name == "b.small" ? 2.0 : 1.0); });
  std::vector<double> m;
  for (size_t i = 0; i < opt.parameters().size(); ++i) m.push_back(opt.lr_multiplier(i));
  return m;
}

void run_against_reference(const optim::OptimizerConfig& c) {
  Params ps = make_params(42);
  auto ref = ref_from(ps);
  auto opt = optim::make_optimizer(c, ps.ptrs());
  auto mult = multipliers(*opt);
  for (int k = 0; k < 6; ++k) {
    set_grads(ps, k);
    const double lr = 0.01 * (1.0 + 0.1 * k);
    if (c.type == "sgd") ref_sgd_step(ref, ps, mult, lr, k == 0, c);
    else ref_adam_step(ref, ps, mult, lr, k + 1, c, c.type == "adamw");
    opt->step(lr);
    // fp32 storage of p, m, v: a few ulps per step relative to |p| + 1.
    EXPECT_LT(max_rel_err(ps, ref), 4e-7 * (k + 1)) << c.type << " step " << k;
  }
  EXPECT_EQ(opt->step_count(), 6);
  for (const auto& p : ps.storage) EXPECT_EQ(p.version, 6);
}

}  // namespace

TEST(Optimizers, AdamWMatchesTorchFormulaInFloat64) {
  optim::OptimizerConfig c;
  c.type = "adamw";
  c.weight_decay = 0.1;
  run_against_reference(c);
}

TEST(Optimizers, AdamCoupledWeightDecayMatchesReference) {
  optim::OptimizerConfig c;
  c.type = "adam";
  c.weight_decay = 0.05;
  c.beta1 = 0.8;
  c.beta2 = 0.95;
  run_against_reference(c);
}

TEST(Optimizers, SgdMomentumDampeningMatchesReference) {
  optim::OptimizerConfig c;
  c.type = "sgd";
  c.momentum = 0.9;
  c.dampening = 0.1;
  c.weight_decay = 1e-2;
  run_against_reference(c);
}

TEST(Optimizers, SgdNesterovAndPlainMatchReference) {
  optim::OptimizerConfig c;
  c.type = "sgd";
  c.momentum = 0.9;
  c.nesterov = true;
  run_against_reference(c);
  c.momentum = 0;
  c.nesterov = false;
  run_against_reference(c);
}

// Hand-computed: p=1, g=0.5, lr=0.1, wd=0.1. Decay: p = 0.99. m = 0.05,
// v = 0.00025; m/(1-0.9) = 0.5, sqrt(v/(1-0.999)) = 0.5, so the step is
// lr * 0.5/(0.5 + 1e-8) and p = 0.99 - 0.1 = 0.89 (to 2e-9).
// Plain Adam with the same wd instead adds 0.1 to g: g = 0.6, and the first
// step is again lr * sign(g): p = 0.9.
TEST(Optimizers, FirstStepByHand) {
  for (const char* type : {"adamw", "adam"}) {
    Parameter p;
    p.name = "x";
    p.value = Tensor::from({1.0f}, {1});
    p.grad = Tensor::from({0.5f}, {1});
    optim::OptimizerConfig c;
    c.type = type;
    c.weight_decay = 0.1;
    auto opt = optim::make_optimizer(c, {&p});
    opt->step(0.1);
    EXPECT_NEAR(p.value.f32()[0], std::string(type) == "adamw" ? 0.89f : 0.9f, 1e-7) << type;
  }
  // decay = false: no decay at all.
  Parameter q;
  q.name = "bias";
  q.decay = false;
  q.value = Tensor::from({1.0f}, {1});
  q.grad = Tensor::from({0.5f}, {1});
  optim::OptimizerConfig c;
  c.weight_decay = 0.1;
  auto opt = optim::make_optimizer(c, {&q});
  opt->step(0.1);
  EXPECT_NEAR(q.value.f32()[0], 0.9f, 1e-7);
}

TEST(Optimizers, BitIdenticalForAnyThreadCount) {
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    Params ps = make_params(7);
    optim::OptimizerConfig c;
    c.weight_decay = 0.1;
    auto opt = optim::make_optimizer(c, ps.ptrs());
    for (int k = 0; k < 3; ++k) {
      set_grads(ps, k);
      opt->step(1e-3);
    }
    std::vector<float> all;
    for (const auto& p : ps.storage) all.insert(all.end(), p.value.f32(), p.value.f32() + p.value.numel());
    results.push_back(all);
  }
  omp_set_num_threads(2);
  EXPECT_EQ(0, std::memcmp(results[0].data(), results[1].data(), results[0].size() * 4));
  EXPECT_EQ(0, std::memcmp(results[0].data(), results[2].data(), results[0].size() * 4));
}

// Save after 3 steps, restore into a fresh optimizer over copied parameters,
// continue both for 3 steps: bit-identical parameters.
TEST(Optimizers, StateRoundTripResumesBitIdentically) {
  for (const char* type : {"adamw", "sgd"}) {
    optim::OptimizerConfig c;
    c.type = type;
    c.momentum = 0.9;
    c.weight_decay = 0.1;
    Params a = make_params(3);
    auto opt_a = optim::make_optimizer(c, a.ptrs());
    for (int k = 0; k < 3; ++k) {
      set_grads(a, k);
      opt_a->step(1e-2);
    }
    std::map<std::string, Tensor> saved;
    for (const auto& [name, t] : opt_a->state_tensors()) saved.emplace(name, t.clone());
    const std::string json = opt_a->state_json();

    Params b = make_params(3);
    for (size_t j = 0; j < b.storage.size(); ++j) b.storage[j].value = a.storage[j].value.clone();
    auto opt_b = optim::make_optimizer(c, b.ptrs());
    opt_b->load_state(saved, json);
    EXPECT_EQ(opt_b->step_count(), 3);
    for (int k = 3; k < 6; ++k) {
      set_grads(a, k);
      set_grads(b, k);
      opt_a->step(1e-2);
      opt_b->step(1e-2);
    }
    for (size_t j = 0; j < a.storage.size(); ++j)
      EXPECT_EQ(0, std::memcmp(a.storage[j].value.raw(), b.storage[j].value.raw(), a.storage[j].value.bytes()))
          << type << " " << a.storage[j].name;
  }
}

TEST(Optimizers, BadStateIsRefusedWithTheTensorName) {
  Params ps = make_params(1);
  auto opt = optim::make_optimizer({}, ps.ptrs());
  auto state = opt->state_tensors();
  const std::string json = opt->state_json();
  auto expect_error = [&](const std::map<std::string, Tensor>& t, const std::string& j, const std::string& needle) {
    try {
      opt->load_state(t, j);
      ADD_FAILURE() << "no error, expected one mentioning " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto missing = state;
  missing.erase("b.small.exp_avg_sq");
  expect_error(missing, json, "b.small.exp_avg_sq");
  auto wrong_shape = state;
  wrong_shape["ln.gain.exp_avg"] = Tensor::zeros({34});
  expect_error(wrong_shape, json, "ln.gain.exp_avg");
  // Values no optimizer could have written: a negative second moment (its
  // square root is NaN) and non-finite moments.
  auto negative = state;
  negative["b.small.exp_avg_sq"] = negative.at("b.small.exp_avg_sq").clone();
  negative["b.small.exp_avg_sq"].f32()[1] = -1.0f;
  expect_error(negative, json, "'b.small.exp_avg_sq' holds -1.0 at element 1 (must be >= 0)");
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto nonfinite = state;
    nonfinite["ln.gain.exp_avg"] = nonfinite.at("ln.gain.exp_avg").clone();
    nonfinite["ln.gain.exp_avg"].f32()[0] = bad;
    expect_error(nonfinite, json, "'ln.gain.exp_avg' holds non-finite values (at element 0)");
  }
  auto scaled = state;  // fp32 moments carry scale 1; another is no power of two
  scaled["ln.gain.exp_avg"] = scaled.at("ln.gain.exp_avg").clone();
  scaled["ln.gain.exp_avg"].set_scale(3.0f);
  expect_error(scaled, json, "power of two");
  expect_error(state, R"({"type":"sgd","step":3})", "sgd");
  expect_error(state, "{not json", "not valid JSON");
  EXPECT_EQ(opt->step_count(), 0);
}

TEST(Optimizers, BadConfigurationIsRefused) {
  Params ps = make_params(1);
  optim::OptimizerConfig c;
  c.type = "lion";
  EXPECT_THROW(optim::make_optimizer(c, ps.ptrs()), std::invalid_argument);
  c.type = "adam";
  c.beta2 = 1.0;
  EXPECT_THROW(optim::make_optimizer(c, ps.ptrs()), std::invalid_argument);
  c = {};
  c.type = "sgd";
  c.nesterov = true;  // without momentum
  EXPECT_THROW(optim::make_optimizer(c, ps.ptrs()), std::invalid_argument);
  auto dup = ps.ptrs();
  dup.push_back(dup[0]);
  EXPECT_THROW(optim::make_optimizer({}, dup), std::invalid_argument);
}
