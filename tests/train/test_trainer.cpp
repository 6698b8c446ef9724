// Trainer semantics on a toy bigram model (toy_model.hpp): gradient
// accumulation normalised by the step's total target count, skipped steps,
// and the gradient format's underflow/overflow.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "mantissa/optim/optimizer.hpp"
#include "mantissa/train/trainer.hpp"
#include "toy_model.hpp"

using namespace mantissa;
using toy::ints;

namespace {

constexpr int64_t V = 16, T = 8;

// A micro-batch of `rows` windows with `ignored` targets set to -1.
nn::Batch random_batch(std::mt19937_64& rng, int64_t rows, int64_t ignored) {
  std::vector<int32_t> x(static_cast<size_t>(rows * T)), y(x.size());
  for (auto& v : x) v = static_cast<int32_t>(rng() % V);
  for (auto& v : y) v = static_cast<int32_t>(rng() % V);
  for (int64_t i = 0; i < ignored; ++i) y[static_cast<size_t>((i * 7) % (rows * T))] = -1;
  return {ints(x, {rows, T}), ints(y, {rows, T})};
}

nn::Batch concat(const std::vector<nn::Batch>& parts) {
  std::vector<int32_t> x, y;
  int64_t rows = 0;
  for (const auto& b : parts) {
    x.insert(x.end(), b.inputs.data<int32_t>(), b.inputs.data<int32_t>() + b.inputs.numel());
    y.insert(y.end(), b.targets.data<int32_t>(), b.targets.data<int32_t>() + b.targets.numel());
    rows += b.inputs.dim(0);
  }
  return {ints(x, {rows, T}), ints(y, {rows, T})};
}

optim::LrSchedule constant_lr(double lr) {
  optim::LrSchedule s;
  s.max_lr = s.min_lr = lr;
  return s;
}

std::vector<float> weights(nn::Model& m) {
  std::vector<float> w;
  for (auto* p : m.parameters()) {
    auto v = p->value.to_vector();
    w.insert(w.end(), v.begin(), v.end());
  }
  return w;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

}  // namespace

TEST(Trainer, AccumulatedMicroBatchesEqualOneBigBatch) {
  std::mt19937_64 rng(5);
  // Different numbers of ignored targets per micro-batch: a mean of
  // per-micro-batch means would weight them wrongly.
  std::vector<nn::Batch> micro = {random_batch(rng, 2, 0), random_batch(rng, 2, 5), random_batch(rng, 2, 13)};
  const nn::Batch big = concat(micro);
  optim::OptimizerConfig oc;
  oc.type = "sgd";
  oc.momentum = 0.9;
  const recipe::Recipe fp32 = recipe::find_recipe("fp32");

  toy::Bigram ma(V, 3), mb(V, 3);
  auto oa = optim::make_optimizer(oc, ma.parameters()), ob = optim::make_optimizer(oc, mb.parameters());
  toy::ListSource sa(micro), sb({big});
  train::TrainerOptions opt_a, opt_b;
  opt_a.grad_accum = 3;
  opt_a.schedule = opt_b.schedule = constant_lr(0.5);
  train::Trainer ta(ma, *oa, sa, nullptr, fp32, opt_a), tb(mb, *ob, sb, nullptr, fp32, opt_b);
  for (int s = 0; s < 4; ++s) {
    const auto a = ta.train_step(), b = tb.train_step();
    EXPECT_EQ(a.targets, b.targets);
    EXPECT_EQ(a.targets, 48 - 18);
    // Both loss sums are fp64, but after step 0 the weights differ by fp32
    // rounding: the micro-batch gradients are summed whole (g0 + g1 + g2).
    EXPECT_NEAR(a.loss, b.loss, 1e-8 * std::fabs(b.loss));
    EXPECT_LT(max_abs_diff(weights(ma), weights(mb)), 2e-6) << "step " << s;
  }
  toy::Bigram untrained(V, 3);
  EXPECT_GT(max_abs_diff(weights(ma), weights(untrained)), 1e-2);  // it did train

  // The wrong normalisation (mean of per-micro-batch means) is visibly
  // different on the same data, so the test above can fail.
  toy::Bigram right(V, 9), wrong(V, 9);
  int64_t total = 0;
  for (auto& b : micro) total += amp::count_targets(b);
  for (auto& b : micro) {
    right.forward_backward(b, 1.0f / static_cast<float>(total));
    wrong.forward_backward(b, 1.0f / (3.0f * static_cast<float>(amp::count_targets(b))));
  }
  std::vector<float> gr = right.parameters()[0]->grad.to_vector(), gw = wrong.parameters()[0]->grad.to_vector();
  EXPECT_GT(max_abs_diff(gr, gw), 1e-3);
}

TEST(Trainer, SkippedStepLeavesWeightsOptimizerAndScheduleUnchanged) {
  std::mt19937_64 rng(11);
  toy::Bigram model(V, 4);
  optim::OptimizerConfig oc;  // adamw
  auto opt = optim::make_optimizer(oc, model.parameters());
  toy::ListSource src({random_batch(rng, 2, 1), random_batch(rng, 2, 2)});
  train::TrainerOptions to;
  to.schedule.max_lr = 1e-2;
  to.schedule.min_lr = 1e-3;
  to.schedule.warmup_steps = 10;  // lr changes every step
  to.schedule.decay_steps = 100;
  train::Trainer trainer(model, *opt, src, nullptr, recipe::find_recipe("fp16-amp"), to);

  const auto s1 = trainer.train_step();
  EXPECT_FALSE(s1.skipped);
  EXPECT_EQ(s1.lr, to.schedule.at(0));
  EXPECT_EQ(s1.loss_scale, 65536.0);
  const auto before = weights(model);
  const int64_t opt_steps = opt->step_count();

  model.poison_next_backward = true;
  const auto s2 = trainer.train_step();
  EXPECT_TRUE(s2.skipped);
  EXPECT_EQ(s2.lr, to.schedule.at(1));
  EXPECT_EQ(weights(model), before);  // bit for bit
  EXPECT_EQ(opt->step_count(), opt_steps);
  EXPECT_EQ(trainer.amp().updates(), 1);
  EXPECT_EQ(trainer.amp().scaler().scale(), 32768.0);
  EXPECT_EQ(trainer.amp().scaler().skipped_steps(), 1);
  for (auto* p : model.parameters())  // grads are cleared for the next step
    for (float g : p->grad.to_vector()) ASSERT_EQ(g, 0.0f);

  const auto s3 = trainer.train_step();
  EXPECT_FALSE(s3.skipped);
  EXPECT_EQ(s3.lr, to.schedule.at(1));  // the schedule did not move on the skipped step
  EXPECT_EQ(s3.loss_scale, 32768.0);
  EXPECT_EQ(trainer.amp().updates(), 2);
  EXPECT_EQ(trainer.step(), 3);
  EXPECT_NE(weights(model), before);
}

TEST(Trainer, Fp16GradientsOverflowAndUnderflowWithoutAGoodScale) {
  std::mt19937_64 rng(2);
  const nn::Batch b = random_batch(rng, 4, 0);
  optim::OptimizerConfig oc;
  for (double scale : {0x1p40, 0x1p-40}) {
    toy::Bigram model(V, 4);
    auto opt = optim::make_optimizer(oc, model.parameters());
    recipe::Recipe r = recipe::find_recipe("fp16-pure");
    r.loss_scale.method = recipe::ScalingMethod::static_scale;
    r.loss_scale.init_scale = scale;
    amp::AmpOptions ao;
    ao.grad_stats = true;
    amp::Amp a(model, *opt, r, ao);
    a.backward(b);
    const auto res = a.step(1e-3);
    const auto stats = nlohmann::json::parse(res.grad_stats_json);
    EXPECT_EQ(stats["format"], "fp16");
    if (scale > 1) {
      // Gradients ~ 2^40 / 32 are far above 65504: overflow, step skipped.
      EXPECT_TRUE(res.skipped);
      EXPECT_GT(stats["groups"]["all"]["overflow"].get<double>(), 0.3);
    } else {
      // Gradients ~ 2^-45 are below fp16's 2^-24: all flushed, so the update
      // is a zero gradient step (weights change only by AdamW's decay).
      EXPECT_FALSE(res.skipped);
      EXPECT_EQ(res.grad_norm, 0.0);
      EXPECT_GT(stats["groups"]["emb.weight"]["flushed"].get<double>(), 0.1);
    }
  }
}
