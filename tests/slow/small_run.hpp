// A small model trained on the default corpus for the slow learning tests:
// 2 layers, d_model 64, 4 heads, 16 x 64 tokens a step, 2000 steps (warm-up
// 50), 1 thread, the model's default learning rate, evaluated on 16 held-out
// batches.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <string>

#include "mantissa/train/session.hpp"

namespace mantissa::slow_test {

struct SmallRun {
  double lr = 0;  // the rate the session chose
  train::EvalMetrics metrics;
};

// Empty when the default corpus is missing (the caller skips).
inline std::optional<SmallRun> train_small(const std::string& model, const std::string& recipe, int64_t seed) {
  const std::filesystem::path corpus = std::filesystem::path(MANTISSA_SOURCE_DIR) / ".cache" / "data" / "austen.txt";
  if (!std::filesystem::exists(corpus)) return std::nullopt;
  train::TrainConfig c;
  c.model = model;
  c.data = corpus.string();
  c.layers = 2;
  c.d_model = 64;
  c.heads = 4;
  c.seq_len = 64;
  c.batch_size = 16;
  c.steps = 2000;
  c.warmup = 50;
  c.eval_batches = 16;
  c.threads = 1;
  c.seed = seed;
  c.recipe = recipe;
  auto s = train::build_session(c);
  for (int64_t i = 0; i < c.steps; ++i) {
    const double loss = s->trainer->train_step().loss;
    EXPECT_TRUE(std::isfinite(loss)) << "step " << i;
    if (!std::isfinite(loss)) break;
  }
  return SmallRun{s->config.lr, s->trainer->evaluate()};
}

}  // namespace mantissa::slow_test
