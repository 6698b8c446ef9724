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

using golden::batch_of;
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

class GoldenMLP : public ::testing::Test {
 protected:
  void SetUp() override {
    golden::load_model("mlp", config_of, g_, model_);
  }
  Golden g_;
  std::unique_ptr<nn::MLP> model_;
};

TEST_F(GoldenMLP, LogitsMatchReference) { golden::expect_logits(g_, *model_); }

TEST_F(GoldenMLP, LossAndAllGradientsMatchReference) {
  ASSERT_NO_FATAL_FAILURE(golden::expect_mean_loss(g_, *model_));
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

TEST_F(GoldenMLP, TenAdamWStepsMatchReferenceLosses) { golden::expect_adamw_losses(g_, *model_, 0.1); }

}  // namespace
}  // namespace mantissa
