// Helpers shared by tests/nn/test_golden_{gpt,mlp,llama,bert}.cpp: read a golden file written by
// tests/golden/make_golden*.py, build its model with its weights loaded by parameter name, and
// measure how far mantissa's logits, loss, gradients and AdamW losses are from the float64
// PyTorch reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "mantissa/io/safetensors.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/optim/optimizer.hpp"

namespace mantissa::golden {

// Tolerances (stated in tests/golden/README.md). PyTorch's own fp32 run of the same model misses
// the float64 reference by ~6e-7 (gradients, relative to each tensor's max |value|) and ~6e-7
// (AdamW losses, absolute); mantissa's fp32 kernels get ~15x that headroom.
inline constexpr double kLogitsRelTol = 1e-5;     // max|a-r| / max|r| over the logits
inline constexpr double kGradRelTol = 1e-5;       // max|a-r| / max|r| per parameter gradient
inline constexpr double kLossAbsTol = 1e-5;       // |mean loss - reference| in nats
inline constexpr double kAdamwLossAbsTol = 1e-5;  // per step, mean loss in nats

struct Golden {
  std::string path;
  io::SafetensorsFile file;

  const Tensor& at(const std::string& name) const {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) throw std::runtime_error(path + ": no tensor '" + name + "'");
    return it->second;
  }
  std::string meta(const std::string& key) const {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end()) throw std::runtime_error(path + ": no metadata '" + key + "'");
    return it->second;
  }
  nlohmann::json meta_json(const std::string& key) const {
    return nlohmann::json::parse(meta(key));
  }
  double meta_double(const std::string& key) const { return std::stod(meta(key)); }
  int64_t meta_int(const std::string& key) const { return std::stoll(meta(key)); }
};

inline Golden load_golden(const std::string& name) {
  Golden g;
  g.path = std::string(MANTISSA_SOURCE_DIR) + "/tests/golden/data/" + name + ".safetensors";
  g.file = io::load_safetensors(g.path, MemoryKind::activation);
  return g;
}

// max|actual - reference| / max|reference|, in double. Shapes must match.
inline double rel_max_diff(const Tensor& actual, const Tensor& reference) {
  EXPECT_EQ(shape_str(actual.shape()), shape_str(reference.shape()));
  if (actual.shape() != reference.shape()) return INFINITY;
  std::vector<float> a = actual.to_vector(), r = reference.to_vector();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    double d = std::fabs(static_cast<double>(a[i]) - r[i]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::fabs(static_cast<double>(r[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// The golden file's tensors that are model parameters (everything except the batch, the
// outputs and the gradients).
inline std::set<std::string> golden_parameter_names(const Golden& g) {
  static const std::set<std::string> not_params = {"inputs", "targets", "logits",
                                                   "loss_per_target"};
  std::set<std::string> names;
  for (const auto& [name, t] : g.file.tensors)
    if (!not_params.count(name) && name.rfind("grad.", 0) != 0) names.insert(name);
  return names;
}

// Copies every golden weight into the model's parameter of the same name; the model and the
// file must name exactly the same parameters with the same shapes.
inline void load_parameters(const Golden& g, nn::Model& model) {
  std::set<std::string> expected = golden_parameter_names(g), seen;
  for (autograd::Parameter* p : model.parameters()) {
    ASSERT_TRUE(expected.count(p->name)) << "model parameter " << p->name << " not in " << g.path;
    const Tensor& src = g.at(p->name);
    ASSERT_EQ(shape_str(src.shape()), shape_str(p->value.shape())) << p->name;
    ASSERT_EQ(src.dtype(), DType::f32) << p->name;
    ASSERT_EQ(p->value.dtype(), DType::f32) << p->name;
    std::memcpy(p->value.raw(), src.raw(), src.bytes());
    ++p->version;
    seen.insert(p->name);
  }
  EXPECT_EQ(seen, expected) << "golden weights the model does not have";
}

// Parameter::decay must match what the reference AdamW decayed.
inline void expect_decay_flags(const Golden& g, nn::Model& model) {
  std::set<std::string> decayed;
  for (const auto& n : g.meta_json("decay")) decayed.insert(n.get<std::string>());
  for (autograd::Parameter* p : model.parameters())
    EXPECT_EQ(p->decay, decayed.count(p->name) == 1) << p->name;
}

// Compares every parameter gradient (d mean loss / d param) with the reference; returns the
// largest relative difference and prints one line per parameter.
inline double expect_gradients(const Golden& g, nn::Model& model, double tol) {
  double worst = 0;
  for (autograd::Parameter* p : model.parameters()) {
    double rel = rel_max_diff(p->grad, g.at("grad." + p->name));
    EXPECT_LE(rel, tol) << "gradient of " << p->name;
    std::printf("  grad %-40s rel max diff %.2e\n", p->name.c_str(), rel);
    worst = std::max(worst, rel);
  }
  return worst;
}

// The mean loss before each of the reference's AdamW steps, taken on the golden batch with
// mantissa's AdamW and the hyper-parameters stored in the file.
inline std::vector<double> adamw_losses(const Golden& g, nn::Model& model, const nn::Batch& batch) {
  nlohmann::json h = g.meta_json("adamw");
  optim::OptimizerConfig cfg;
  cfg.type = "adamw";
  cfg.beta1 = h["betas"][0].get<double>();
  cfg.beta2 = h["betas"][1].get<double>();
  cfg.eps = h["eps"].get<double>();
  cfg.weight_decay = h["weight_decay"].get<double>();
  auto opt = optim::make_optimizer(cfg, model.parameters());
  std::vector<double> losses;
  for (int step = 0; step < h["steps"].get<int>(); ++step) {
    model.zero_grad();
    nn::LossSum ls =
        model.forward_backward(batch, 1.0f / static_cast<float>(g.meta_int("loss_count")));
    losses.push_back(ls.sum / static_cast<double>(ls.count));
    opt->step(h["lr"].get<double>());
  }
  return losses;
}

// The golden batch (inputs, targets).
inline nn::Batch batch_of(const Golden& g) { return {g.at("inputs").clone(), g.at("targets").clone()}; }

// g = golden file `name`; model = the M of config_of(g) holding the file's weights.
template <class M, class ConfigOf>
void load_model(const std::string& name, ConfigOf config_of, Golden& g, std::unique_ptr<M>& model) {
  g = load_golden(name);
  model = std::make_unique<M>(config_of(g));
  load_parameters(g, *model);
}

inline void expect_logits(const Golden& g, nn::Model& model) {
  const double rel = rel_max_diff(model.logits(g.at("inputs")), g.at("logits"));
  std::printf("logits rel max diff %.2e\n", rel);
  EXPECT_LE(rel, kLogitsRelTol);
}

// One forward/backward of the golden batch with gradients of the mean loss (left in the
// model's parameters); the loss and the count of targets that count against the reference.
inline void expect_mean_loss(const Golden& g, nn::Model& model) {
  const int64_t count = g.meta_int("loss_count");
  model.zero_grad();
  const nn::LossSum ls = model.forward_backward(batch_of(g), 1.0f / static_cast<float>(count));
  ASSERT_EQ(ls.count, count) << "targets -1 must be ignored";
  const double mean = ls.sum / static_cast<double>(ls.count);
  std::printf("loss mean %.9f reference %.9f\n", mean, g.meta_double("loss_mean"));
  EXPECT_NEAR(mean, g.meta_double("loss_mean"), kLossAbsTol);
}

// The AdamW losses against the reference's, which must fall by at least min_drop (a model
// that ignored the updates would then fail).
inline void expect_adamw_losses(const Golden& g, nn::Model& model, double min_drop) {
  const std::vector<double> got = adamw_losses(g, model, batch_of(g));
  const nlohmann::json want = g.meta_json("adamw_losses");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    std::printf("step %zu loss %.7f reference %.7f diff %.1e\n", i, got[i], want[i].get<double>(),
                got[i] - want[i].get<double>());
    EXPECT_NEAR(got[i], want[i].get<double>(), kAdamwLossAbsTol) << "step " << i;
  }
  EXPECT_LT(want.back().get<double>(), want.front().get<double>() - min_drop);
}

}  // namespace mantissa::golden
