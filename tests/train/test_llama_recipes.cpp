// Every registered recipe on the Llama-style decoder: a few training steps
// from the library's session (the same path as `mantissa train --model
// llama`), finite losses, and the recipe's operand casts really happen on
// this model (counted at the quantiser each recipe installs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "mantissa/amp/recipe.hpp"
#include "mantissa/nn/llama.hpp"
#include "mantissa/train/session.hpp"

namespace mantissa {
namespace {
namespace fs = std::filesystem;

// Forwards to the recipe's quantiser and counts the casts by role.
class CountingQuantiser final : public autograd::OperandQuantiser {
 public:
  explicit CountingQuantiser(std::shared_ptr<autograd::OperandQuantiser> inner) : inner_(std::move(inner)) {}
  bool casts_forward() const override { return inner_->casts_forward(); }
  bool casts_backward() const override { return inner_->casts_backward(); }
  autograd::QuantisedOperand quantise(const Tensor& x, int64_t batch, int64_t rows, int64_t cols, int axis,
                                      const autograd::QuantSite& site, Tensor* decoded) override {
    ++(site.role == autograd::OperandRole::grad_output ? backward : forward);
    return inner_->quantise(x, batch, rows, cols, axis, site, decoded);
  }
  Weight quantise_weight(const nn::Parameter& p, int axis, const autograd::QuantSite& site) override {
    ++weights;
    return inner_->quantise_weight(p, axis, site);
  }
  Tensor decode(const autograd::QuantisedOperand& q) const override { return inner_->decode(q); }
  void end_step() override { inner_->end_step(); }
  std::atomic<int64_t> forward{0}, backward{0}, weights{0};

 private:
  std::shared_ptr<autograd::OperandQuantiser> inner_;
};

class LlamaRecipes : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mantissa_llama_recipes_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::mt19937_64 rng(5);
    const char* words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "lazy ", "dog", ".\n", ", "};
    std::string text;
    while (text.size() < 8000) text += words[rng() % std::size(words)];
    std::ofstream(dir_ / "corpus.txt") << text;
  }
  void TearDown() override { fs::remove_all(dir_); }
  train::TrainConfig tiny(const std::string& recipe) const {
    train::TrainConfig c;
    c.model = "llama";
    c.data = (dir_ / "corpus.txt").string();
    c.layers = 2;
    c.d_model = 32;
    c.heads = 4;
    c.kv_heads = 2;
    c.seq_len = 16;
    c.batch_size = 4;
    c.steps = 3;
    c.warmup = 1;
    c.eval_batches = 1;
    c.threads = 1;
    c.recipe = recipe;
    return c;
  }
  fs::path dir_;
};

TEST_F(LlamaRecipes, EveryRecipeTrainsWithItsCasts) {
  for (const amp::Recipe& r : amp::recipes()) {
    SCOPED_TRACE(r.name);
    if (r.parametrisation == amp::Parametrisation::umup) {  // u-muP: the GPT only, refused by name
      EXPECT_THROW(train::build_session(tiny(r.name)), std::invalid_argument);
      continue;
    }
    auto s = train::build_session(tiny(r.name));
    ASSERT_EQ(s->model->kind(), "llama");
    EXPECT_EQ(static_cast<nn::Llama&>(*s->model).config().unit.enabled, r.parametrisation == amp::Parametrisation::unit);
    // Recipes without operand casts multiply in their matmul format: the model runs it.
    if (r.matmul_format != "fp32" && !s->model->precision().quantiser) {
      EXPECT_NE(s->model->precision().matmul, DType::f32);
    }
    std::shared_ptr<CountingQuantiser> counter;
    if (auto q = s->model->precision().quantiser) {
      counter = std::make_shared<CountingQuantiser>(q);
      autograd::PrecisionPolicy p = s->model->precision();
      p.quantiser = counter;
      s->model->set_precision(p);
    }
    double first = 0, last = 0;
    for (int i = 0; i < 3; ++i) {
      const train::StepMetrics m = s->trainer->train_step();
      ASSERT_TRUE(std::isfinite(m.loss)) << "step " << i;
      (i == 0 ? first : last) = m.loss;
    }
    EXPECT_TRUE(std::isfinite(s->trainer->evaluate().val_loss));
    EXPECT_GT(first, 0.0);
    EXPECT_GT(last, 0.0);
    std::printf("%-16s loss %.4f -> %.4f  casts fwd %ld weight %ld bwd %ld\n", r.name.c_str(), first, last,
                counter ? static_cast<long>(counter->forward) : 0L, counter ? static_cast<long>(counter->weights) : 0L,
                counter ? static_cast<long>(counter->backward) : 0L);
    if (counter) {
      if (counter->casts_forward()) {
        EXPECT_GT(counter->forward + counter->weights, 0) << "no forward cast on the llama";
      }
      if (counter->casts_backward()) {
        EXPECT_GT(counter->backward.load(), 0) << "no gradient cast on the llama";
      }
    }
  }
}

}  // namespace
}  // namespace mantissa
