// The MLP classifier against PyTorch: weights, batch, logits, loss, every parameter gradient
// and the losses of 10 AdamW steps written by tests/golden/make_golden.py (float64 PyTorch
// reference; see tests/golden/README.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "golden/golden.hpp"
#include "mantissa/nn/mlp.hpp"

namespace mantissa {
namespace {

using golden::Golden;

nn::MLPConfig config_of(const Golden& g) {
  std::vector<int64_t> sizes = g.meta_json("sizes").get<std::vector<int64_t>>();
  nn::MLPConfig c;
  c.inputs = sizes.front();
  c.hidden.assign(sizes.begin() + 1, sizes.end() - 1);
  c.classes = sizes.back();
  c.activation = "relu";
  return c;
}

nn::Batch batch_of(const Golden& g) { return {g.at("inputs").clone(), g.at("targets").clone()}; }

class GoldenMLP : public ::testing::Test {
 protected:
  void SetUp() override {
    g_ = golden::load_golden("mlp");
    model_ = std::make_unique<nn::MLP>(config_of(g_));
    golden::load_parameters(g_, *model_);
  }
  Golden g_;
  std::unique_ptr<nn::MLP> model_;
};

TEST_F(GoldenMLP, LogitsMatchReference) {
  double rel = golden::rel_max_diff(model_->logits(g_.at("inputs")), g_.at("logits"));
  std::printf("logits rel max diff %.2e\n", rel);
  EXPECT_LE(rel, golden::kLogitsRelTol);
}

TEST_F(GoldenMLP, LossAndAllGradientsMatchReference) {
  const int64_t count = g_.meta_int("loss_count");
  model_->zero_grad();
  nn::LossSum ls = model_->forward_backward(batch_of(g_), 1.0f / static_cast<float>(count));
  ASSERT_EQ(ls.count, count);
  const double mean = ls.sum / static_cast<double>(ls.count);
  std::printf("loss mean %.9f reference %.9f\n", mean, g_.meta_double("loss_mean"));
  EXPECT_NEAR(mean, g_.meta_double("loss_mean"), golden::kLossAbsTol);
  double worst = golden::expect_gradients(g_, *model_, golden::kGradRelTol);
  std::printf("worst gradient rel max diff %.2e (PyTorch fp32: %.2e)\n", worst,
              g_.meta_double("torch_fp32_grad_rel_err"));
}

TEST_F(GoldenMLP, EvaluateMatchesReferenceLoss) {
  nn::LossSum ls = model_->evaluate(batch_of(g_));
  ASSERT_EQ(ls.count, g_.meta_int("loss_count"));
  EXPECT_NEAR(ls.sum, g_.meta_double("loss_sum"),
              golden::kLossAbsTol * static_cast<double>(ls.count));
}

TEST_F(GoldenMLP, DecayFlagsMatchReferenceOptimizer) { golden::expect_decay_flags(g_, *model_); }

TEST_F(GoldenMLP, TenAdamWStepsMatchReferenceLosses) {
  std::vector<double> got = golden::adamw_losses(g_, *model_, batch_of(g_));
  nlohmann::json want = g_.meta_json("adamw_losses");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    std::printf("step %zu loss %.7f reference %.7f diff %.1e\n", i, got[i], want[i].get<double>(),
                got[i] - want[i].get<double>());
    EXPECT_NEAR(got[i], want[i].get<double>(), golden::kAdamwLossAbsTol) << "step " << i;
  }
  EXPECT_LT(want.back().get<double>(), want.front().get<double>() - 0.1);
}

}  // namespace
}  // namespace mantissa
