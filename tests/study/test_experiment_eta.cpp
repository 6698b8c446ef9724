// The recipe study's time estimates (study/experiment_eta.hpp): the work
// model against hand-counted operations, and every rule of StudyClock
// (same recipe, running run, task mean, other task, report time) against
// hand arithmetic.
#include <gtest/gtest.h>

#include <cmath>

#include "mantissa/study/experiment_eta.hpp"

using mantissa::study::RunSpec;
using mantissa::study::StudyClock;
using mantissa::train::TrainConfig;

namespace {

TrainConfig gpt_config() {
  TrainConfig c;
  c.model = "gpt";
  c.layers = 2;
  c.d_model = 128;
  c.seq_len = 64;
  c.batch_size = 16;
  c.steps = 400;
  c.eval_every = 40;
  c.eval_batches = 16;
  return c;
}

TrainConfig mlp_config() {
  TrainConfig c;
  c.model = "mlp";
  c.layers = 2;
  c.d_model = 256;
  c.batch_size = 128;
  c.steps = 300;
  c.eval_every = 30;
  return c;
}

RunSpec spec(const std::string& task, const std::string& recipe, int64_t seed) {
  RunSpec r;
  r.task = task;
  r.recipe = recipe;
  r.seed = seed;
  r.config = task == "gpt" ? gpt_config() : mlp_config();
  return r;
}

}  // namespace

TEST(ExperimentEta, RunFlopsCountsTrainingStepsAndEvaluations) {
  // GPT forward per token: 2 (12 L d^2 + 2 L T d + d V) = 2 (393216 + 32768 + 32768).
  const int64_t gpt_fwd = 2 * (12 * 2 * 128 * 128 + 2 * 2 * 64 * 128 + 128 * 256);
  ASSERT_EQ(gpt_fwd, 917504);
  // 400 steps of 1024 tokens at 3 forwards, 10 evaluations (steps 40..360 and the end) of 16 batches.
  const int64_t gpt = 3 * gpt_fwd * 1024 * 400 + gpt_fwd * 1024 * 16 * 10;
  EXPECT_DOUBLE_EQ(mantissa::study::run_flops(gpt_config()), static_cast<double>(gpt));
  // MLP forward per image: 2 (784 x 256 + 256 x 256 + 256 x 10); 10 passes over 10,000 test images.
  const int64_t mlp_fwd = 2 * (784 * 256 + 256 * 256 + 256 * 10);
  const int64_t mlp = 3 * mlp_fwd * 128 * 300 + mlp_fwd * 10000 * 10;
  EXPECT_DOUBLE_EQ(mantissa::study::run_flops(mlp_config()), static_cast<double>(mlp));
  TrainConfig no_eval = gpt_config();
  no_eval.eval_every = 0;  // only the final evaluation
  EXPECT_DOUBLE_EQ(mantissa::study::run_flops(no_eval), static_cast<double>(3 * gpt_fwd * 1024 * 400 + gpt_fwd * 1024 * 16));
}

TEST(ExperimentEta, EstimatesUseTheMostSpecificMeasurement) {
  const std::vector<RunSpec> runs = {spec("gpt", "fp32", 1), spec("gpt", "fp32", 2), spec("gpt", "bf16-amp", 1),
                                     spec("gpt", "fp16-amp", 1), spec("mlp", "fp32", 1), spec("mlp", "unit-fp8", 1)};
  const double G = mantissa::study::run_flops(gpt_config()), M = mantissa::study::run_flops(mlp_config());
  StudyClock clock(runs);

  // Nothing measured, the running run has not passed its first step: unknown.
  auto e = clock.eta(0, 0, 0);
  EXPECT_TRUE(std::isnan(e.run_left));
  EXPECT_TRUE(std::isnan(e.study_left));

  // Run 0 half done in 10 s: 20 s per GPT run for every GPT recipe (task
  // mean of the one live rate) and for mlp fp32 (same recipe) and mlp
  // unit-fp8 (mean of everything), both scaled by the work ratio M / G.
  e = clock.eta(0, 0.5, 10);
  EXPECT_DOUBLE_EQ(e.run_left, 10);
  const double left0 = 10 + 20 + 20 + 20 + 20 * M / G + 20 * M / G;
  EXPECT_NEAR(e.study_left, left0, 1e-9 * left0);
  EXPECT_NEAR(e.done, 10 / (10 + left0), 1e-12);

  // Run 0 took 30 s, its report 1 s. Run 1 (fp32 again) a quarter done in
  // 3 s: its own pace for itself (9 s left), the finished fp32 run's rate
  // for everything else, 1 s of report after each of the 5 runs ahead.
  clock.finished(0, 30);
  clock.between_runs(1);
  e = clock.eta(1, 0.25, 3);
  EXPECT_DOUBLE_EQ(e.run_left, 9);
  const double left1 = 9 + 30 + 30 + 30 * M / G + 30 * M / G + 5 * 1;
  EXPECT_NEAR(e.study_left, left1, 1e-9 * left1);
  EXPECT_NEAR(e.done, (3 + 30 + 1) / (3 + 30 + 1 + left1), 1e-12);

  // fp32 pooled over two seeds: (30 + 50) s / 2 runs = 40 s; bf16-amp 10 s.
  // fp16-amp has no run yet: the mean of the GPT recipes, (40 + 10) / 2.
  clock.finished(1, 50);
  clock.between_runs(3);  // mean report time now 2 s
  clock.finished(2, 10);
  EXPECT_DOUBLE_EQ(clock.estimate(3, StudyClock::npos, 0, 0), 25);
  // mlp fp32: not measured on the MLP; the same recipe on the GPT, per operation.
  EXPECT_NEAR(clock.estimate(4, StudyClock::npos, 0, 0), 40 * M / G, 1e-12 * M);
  // mlp unit-fp8: no MLP rate, no unit-fp8 anywhere: the mean of all (fp32, bf16-amp).
  EXPECT_NEAR(clock.estimate(5, StudyClock::npos, 0, 0), 25 * M / G, 1e-12 * M);

  // Once an MLP run is measured, MLP recipes use the MLP's own rates.
  clock.finished(4, 4);
  EXPECT_DOUBLE_EQ(clock.estimate(5, StudyClock::npos, 0, 0), 4);
  // A run kept from an earlier invocation costs nothing.
  clock.skip(5);
  EXPECT_DOUBLE_EQ(clock.estimate(5, StudyClock::npos, 0, 0), 0);
  // fp16-amp not started yet, nothing after it pending but the skipped one:
  // 25 s plus one report (2 s).
  e = clock.eta(3, 0, 0);
  EXPECT_DOUBLE_EQ(e.run_left, 25);
  EXPECT_DOUBLE_EQ(e.study_left, 25 + 2);
}
