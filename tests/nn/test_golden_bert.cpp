// The BERT encoder with its MLM head against PyTorch (tests/golden/make_golden_bert.py: a
// float64 reference written from the definitions, rows of two segments, one segment and
// mostly padding), post-norm and pre-norm: logits, loss, every parameter gradient and the
// losses of 10 AdamW steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "golden/golden.hpp"
#include "mantissa/nn/bert.hpp"

namespace mantissa {
namespace {

using golden::batch_of;
using golden::Golden;

nn::BertConfig config_of(const Golden& g) {
  nn::BertConfig c;
  c.byte_vocab = g.meta_int("byte_vocab");
  c.context = g.meta_int("max_position_embeddings");
  c.type_vocab = g.meta_int("type_vocab_size");
  c.layers = g.meta_int("num_hidden_layers");
  c.d_model = g.meta_int("hidden_size");
  c.heads = g.meta_int("num_attention_heads");
  c.hidden = g.meta_int("intermediate_size");
  c.pre_norm = g.meta("norm") == "pre";
  return c;
}

class GoldenBert : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    golden::load_model(GetParam(), config_of, g_, model_);
  }
  Golden g_;
  std::unique_ptr<nn::Bert> model_;
};

TEST_P(GoldenBert, LogitsMatchReference) { golden::expect_logits(g_, *model_); }

TEST_P(GoldenBert, LossAndAllGradientsMatchReference) {
  ASSERT_NO_FATAL_FAILURE(golden::expect_mean_loss(g_, *model_));
  // The key bias adds q.b to every score of a row, which the softmax ignores: its gradient is
  // zero in real arithmetic, so it is checked against the largest reference gradient instead.
  double largest = 0, worst = 0;
  for (autograd::Parameter* p : model_->parameters()) {
    const Tensor& r = g_.at("grad." + p->name);
    for (int64_t i = 0; i < r.numel(); ++i) largest = std::max(largest, std::abs(double{r.f32()[i]}));
  }
  for (autograd::Parameter* p : model_->parameters()) {
    SCOPED_TRACE(p->name);
    if (p->name.find("attention.self.key.bias") != std::string::npos) {
      double most = 0;
      for (int64_t i = 0; i < p->grad.numel(); ++i) most = std::max(most, std::abs(double{p->grad.f32()[i]}));
      EXPECT_LE(most, 1e-6 * largest);
      continue;
    }
    const double rel = golden::rel_max_diff(p->grad, g_.at("grad." + p->name));
    EXPECT_LE(rel, golden::kGradRelTol);
    worst = std::max(worst, rel);
  }
  std::printf("worst gradient rel max diff %.2e\n", worst);
}

TEST_P(GoldenBert, EvaluateMatchesReferenceLossAndArgMax) {
  const nn::LossSum ls = model_->evaluate(batch_of(g_));
  EXPECT_NEAR(ls.sum / static_cast<double>(ls.count), g_.meta_double("loss_mean"), golden::kLossAbsTol);
  // Correct predictions from the reference logits' arg-max at the predicted positions.
  const Tensor& z = g_.at("logits");
  const Tensor& y = g_.at("targets");
  const int64_t V = z.dim(-1);
  int64_t correct = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (y.data<int32_t>()[i] < 0) continue;
    const float* row = z.f32() + i * V;
    correct += std::max_element(row, row + V) - row == y.data<int32_t>()[i];
  }
  EXPECT_EQ(ls.correct, correct);
}

TEST_P(GoldenBert, DecayFlagsMatchReferenceOptimizer) { golden::expect_decay_flags(g_, *model_); }

TEST_P(GoldenBert, TenAdamWStepsMatchReferenceLosses) { golden::expect_adamw_losses(g_, *model_, 0.5); }

// The padding mask really enters: the short row 2 alone, cut to its non-padding length,
// gives the logits it has in the padded batch. Padding inside a row is refused.
TEST_P(GoldenBert, PaddedKeysAreMaskedOut) {
  const Tensor ids = g_.at("inputs");
  const int64_t T = ids.dim(1), V = model_->config().vocab();
  const int32_t pad = model_->config().pad_id();
  const int32_t* row2 = ids.data<int32_t>() + 2 * T;
  int64_t len = 0;
  while (len < T && row2[len] != pad) ++len;
  ASSERT_LT(len, T / 2) << "row 2 of the golden batch is mostly padding";
  Tensor alone = Tensor::empty({1, len}, DType::i32);
  std::copy(row2, row2 + len, alone.data<int32_t>());
  const Tensor full = model_->logits(ids), cut = model_->logits(alone);
  double worst = 0;
  for (int64_t i = 0; i < len * V; ++i)
    worst = std::max(worst, std::abs(double{full.f32()[2 * T * V + i]} - double{cut.f32()[i]}));
  EXPECT_LT(worst, 1e-5);

  Tensor bad = ids.clone();
  bad.data<int32_t>()[T + 3] = pad;  // row 1: padding before text
  EXPECT_THROW(model_->logits(bad), std::invalid_argument);
  bad = ids.clone();
  bad.data<int32_t>()[0] = 65;  // row 0 without [CLS]
  EXPECT_THROW(model_->logits(bad), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Norms, GoldenBert, ::testing::Values("bert", "bert_pre"));

}  // namespace
}  // namespace mantissa
