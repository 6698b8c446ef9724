// The whole GPT against PyTorch, in the style of llm.c's test_gpt2: weights, batch, logits,
// loss, every parameter gradient and the losses of 10 AdamW steps written by
// tests/golden/make_golden.py (float64 PyTorch reference; see tests/golden/README.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "golden/golden.hpp"
#include "mantissa/nn/gpt.hpp"

namespace mantissa {
namespace {

using golden::batch_of;
using golden::Golden;

nn::GPTConfig config_of(const Golden& g) {
  nn::GPTConfig c;
  c.vocab = g.meta_int("vocab_size");
  c.context = g.meta_int("n_positions");
  c.layers = g.meta_int("n_layer");
  c.d_model = g.meta_int("n_embd");
  c.heads = g.meta_int("n_head");
  c.dropout = 0.0f;
  return c;
}

class GoldenGPT : public ::testing::Test {
 protected:
  void SetUp() override {
    golden::load_model("gpt", config_of, g_, model_);
  }
  Golden g_;
  std::unique_ptr<nn::GPT> model_;
};

TEST_F(GoldenGPT, LogitsMatchReference) { golden::expect_logits(g_, *model_); }

TEST_F(GoldenGPT, LossAndAllGradientsMatchReference) {
  ASSERT_NO_FATAL_FAILURE(golden::expect_mean_loss(g_, *model_));
  double worst = golden::expect_gradients(g_, *model_, golden::kGradRelTol);
  std::printf("worst gradient rel max diff %.2e (PyTorch fp32: %.2e)\n", worst,
              g_.meta_double("torch_fp32_grad_rel_err"));
}

TEST_F(GoldenGPT, EvaluateMatchesReferenceLoss) {
  nn::LossSum ls = model_->evaluate(batch_of(g_));
  ASSERT_EQ(ls.count, g_.meta_int("loss_count"));
  EXPECT_NEAR(ls.sum, g_.meta_double("loss_sum"),
              golden::kLossAbsTol * static_cast<double>(ls.count));
}

TEST_F(GoldenGPT, DecayFlagsMatchReferenceOptimizer) { golden::expect_decay_flags(g_, *model_); }

TEST_F(GoldenGPT, TenAdamWStepsMatchReferenceLosses) { golden::expect_adamw_losses(g_, *model_, 0.5); }

// The comparison is sharp enough to see a weight stored [out, in] instead of GPT-2's
// Conv1D [in, out]: transposing one square c_proj weight moves the loss far past tolerance.
TEST_F(GoldenGPT, TransposedConv1DWeightIsDetected) {
  autograd::Parameter* proj = nullptr;
  for (autograd::Parameter* p : model_->parameters())
    if (p->name == "transformer.h.0.attn.c_proj.weight") proj = p;
  ASSERT_NE(proj, nullptr);
  const int64_t n = proj->value.dim(0);
  ASSERT_EQ(n, proj->value.dim(1));
  std::vector<float> w = proj->value.to_vector(), t(w.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      t[static_cast<size_t>(j * n + i)] = w[static_cast<size_t>(i * n + j)];
  std::memcpy(proj->value.raw(), t.data(), t.size() * sizeof(float));
  ++proj->version;
  nn::LossSum ls = model_->evaluate(batch_of(g_));
  const double shift =
      std::fabs(ls.sum / static_cast<double>(ls.count) - g_.meta_double("loss_mean"));
  std::printf("loss shift from a transposed c_proj: %.2e\n", shift);
  EXPECT_GT(shift, 10 * golden::kLossAbsTol);
}

}  // namespace
}  // namespace mantissa
