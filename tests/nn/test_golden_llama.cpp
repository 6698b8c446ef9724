// The Llama-style decoder against PyTorch (tests/golden/make_golden_llama.py: a float64
// reference written from the definitions, 4 query heads on 2 kv heads): logits, loss,
// every parameter gradient and the losses of 10 AdamW steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "golden/golden.hpp"
#include "mantissa/nn/llama.hpp"

namespace mantissa {
namespace {

using golden::batch_of;
using golden::Golden;

nn::LlamaConfig config_of(const Golden& g) {
  nn::LlamaConfig c;
  c.vocab = g.meta_int("vocab_size");
  c.context = g.meta_int("max_position_embeddings");
  c.layers = g.meta_int("num_hidden_layers");
  c.d_model = g.meta_int("hidden_size");
  c.heads = g.meta_int("num_attention_heads");
  c.kv_heads = g.meta_int("num_key_value_heads");
  c.hidden = g.meta_int("intermediate_size");
  c.rms_eps = g.meta_double("rms_norm_eps");
  c.rope_theta = g.meta_double("rope_theta");
  return c;
}

class GoldenLlama : public ::testing::Test {
 protected:
  void SetUp() override {
    golden::load_model("llama", config_of, g_, model_);
  }
  Golden g_;
  std::unique_ptr<nn::Llama> model_;
};

TEST_F(GoldenLlama, LogitsMatchReference) { golden::expect_logits(g_, *model_); }

TEST_F(GoldenLlama, LossAndAllGradientsMatchReference) {
  ASSERT_NO_FATAL_FAILURE(golden::expect_mean_loss(g_, *model_));
  const double worst = golden::expect_gradients(g_, *model_, golden::kGradRelTol);
  std::printf("worst gradient rel max diff %.2e (PyTorch fp32: %.2e)\n", worst, g_.meta_double("torch_fp32_grad_rel_err"));
}

TEST_F(GoldenLlama, DecayFlagsMatchReferenceOptimizer) { golden::expect_decay_flags(g_, *model_); }

TEST_F(GoldenLlama, TenAdamWStepsMatchReferenceLosses) { golden::expect_adamw_losses(g_, *model_, 0.5); }

// Smooth-SwiGLU only moves a power-of-two scale between the SwiGLU product and the down
// projection's weight: in fp32 the logits and gradients are those of the plain model.
TEST_F(GoldenLlama, SmoothSwiGLUIsTheSameFunction) {
  nn::LlamaConfig c = config_of(g_);
  c.smooth_swiglu = true;
  nn::Llama smooth(c);
  golden::load_parameters(g_, smooth);
  EXPECT_LE(golden::rel_max_diff(smooth.logits(g_.at("inputs")), g_.at("logits")), golden::kLogitsRelTol);
  const int64_t count = g_.meta_int("loss_count");
  smooth.zero_grad();
  smooth.forward_backward(batch_of(g_), 1.0f / static_cast<float>(count));
  golden::expect_gradients(g_, smooth, golden::kGradRelTol);
}

// Rotary angles really enter: a model whose theta differs misses the reference logits.
TEST_F(GoldenLlama, RopeThetaIsDetected) {
  nn::LlamaConfig c = config_of(g_);
  c.rope_theta = 500.0;
  nn::Llama other(c);
  golden::load_parameters(g_, other);
  const double rel = golden::rel_max_diff(other.logits(g_.at("inputs")), g_.at("logits"));
  std::printf("logits rel max diff at theta 500: %.2e\n", rel);
  EXPECT_GT(rel, 100 * golden::kLogitsRelTol);
}

}  // namespace
}  // namespace mantissa
