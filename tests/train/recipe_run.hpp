// Every registered recipe on one model through the library's session (the
// same path as `mantissa train --model M`): a few training steps with finite
// losses, the parametrisation the recipe asks for, and its operand casts
// really happening on this model (counted at the quantiser each recipe
// installs). u-muP recipes, implemented for the GPT only, must be refused.
// TinyRun gives such a run of a model on a generated corpus.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "mantissa/recipe/recipe.hpp"
#include "mantissa/scalify/scalify_quantiser.hpp"
#include "mantissa/train/session.hpp"
#include "temp_dir.hpp"
#include "train/cli_util.hpp"

namespace mantissa::recipe_test {

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
  Weight quantise_weight(const autograd::Parameter& p, int axis, const autograd::QuantSite& site) override {
    ++weights;
    return inner_->quantise_weight(p, axis, site);
  }
  Tensor decode(const autograd::QuantisedOperand& q) const override { return inner_->decode(q); }
  void end_step() override { inner_->end_step(); }
  const std::shared_ptr<autograd::OperandQuantiser>& inner() const { return inner_; }
  std::atomic<int64_t> forward{0}, backward{0}, weights{0};

 private:
  std::shared_ptr<autograd::OperandQuantiser> inner_;
};

// A tiny run of `model` (2 blocks of width 32, 4 heads, 16 tokens, 4 rows,
// 3 steps, one thread) on 20 kB of generated words in a private directory.
class TinyRun {
 public:
  explicit TinyRun(std::string model) : model_(std::move(model)), dir_(model_ + "_recipes") {
    corpus_ = dir_.write("corpus.txt", cli_test::word_corpus(20000, 5));
  }
  train::TrainConfig config(const std::string& recipe) const {
    train::TrainConfig c;
    c.model = model_;
    c.data = corpus_;
    c.layers = 2;
    c.d_model = 32;
    c.heads = 4;
    c.seq_len = 16;
    c.batch_size = 4;
    c.steps = 3;
    c.warmup = 1;
    c.eval_batches = 1;
    c.threads = 1;
    c.recipe = recipe;
    return c;
  }

 private:
  std::string model_;
  TempDir dir_;
  std::string corpus_;
};

// The dynamic rescales of the last step when the session's recipe propagates scales (a
// scalify quantiser under the counter), else -1.
inline int64_t scalify_rescales(const train::Session& s) {
  const auto counter = std::dynamic_pointer_cast<CountingQuantiser>(s.model->precision().quantiser);
  const auto q = std::dynamic_pointer_cast<scalify::ScalifyQuantiser>(counter ? counter->inner() : nullptr);
  return q ? q->stats().last_step_rescales : -1;
}

// config(recipe) gives the tiny run of `kind`; `check` sees each session after its steps.
inline void expect_every_recipe_trains(const std::string& kind,
                                       const std::function<train::TrainConfig(const std::string&)>& config,
                                       const std::function<void(train::Session&)>& check = {}) {
  for (const recipe::Recipe& r : recipe::recipes()) {
    SCOPED_TRACE(r.name);
    if (r.parametrisation == recipe::Parametrisation::umup) {
      EXPECT_THROW(train::build_session(config(r.name)), std::invalid_argument);
      continue;
    }
    auto s = train::build_session(config(r.name));
    ASSERT_EQ(s->model->kind(), kind);
    EXPECT_EQ(s->model->unit().enabled, r.parametrisation == recipe::Parametrisation::unit);
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
    std::printf("%-22s loss %.4f -> %.4f  casts fwd %ld weight %ld bwd %ld\n", r.name.c_str(), first, last,
                counter ? static_cast<long>(counter->forward) : 0L, counter ? static_cast<long>(counter->weights) : 0L,
                counter ? static_cast<long>(counter->backward) : 0L);
    if (counter) {
      if (counter->casts_forward()) {
        EXPECT_GT(counter->forward + counter->weights, 0) << "no forward cast on the " << kind;
      }
      if (counter->casts_backward()) {
        EXPECT_GT(counter->backward.load(), 0) << "no gradient cast on the " << kind;
      }
    }
    if (check) check(*s);
  }
}

}  // namespace mantissa::recipe_test
