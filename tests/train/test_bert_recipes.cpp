// BERT under the recipes, through the library's session (the same path as
// `mantissa train --model bert`): every registered recipe runs a few steps
// with finite losses and its operand casts really happen on this model
// (counted at the quantiser each recipe installs), under the scalify recipes
// at propagated scales but for 2 dynamic rescales per layer and 2 in the head; and under fp32, bf16-amp,
// fp8-delayed and unit-fp32 the masked-LM loss on the held-out rows falls by
// 2 nats and the masked accuracy reaches the most frequent byte's share, on
// the default corpus when fetched (else a generated one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "mantissa/data/source.hpp"
#include "train/recipe_run.hpp"

namespace mantissa {
namespace {
namespace fs = std::filesystem;

TEST(BertRecipes, EveryRecipeTrainsWithItsCasts) {
  const recipe_test::TinyRun run("bert");
  recipe_test::expect_every_recipe_trains("bert", [&](const std::string& r) { return run.config(r); },
                                          [](train::Session& s) {
                                            EXPECT_GE(s.trainer->evaluate().masked_accuracy, 0.0);
                                            if (const int64_t r = recipe_test::scalify_rescales(s); r >= 0) {
                                              EXPECT_EQ(r, 2 * 2 + 2);
                                            }
                                          });
}

// The share of the most frequent byte among the masked targets of the held-out rows: what
// always guessing one byte scores.
double majority_share(const data::EvalSource& val) {
  std::vector<int64_t> n(512, 0);
  int64_t total = 0;
  for (int64_t i = 0; i < val.num_batches(); ++i) {
    const nn::Batch b = val.batch(i);
    for (int64_t k = 0; k < b.targets.numel(); ++k)
      if (const int32_t y = b.targets.data<int32_t>()[k]; y >= 0) ++n[static_cast<size_t>(y)], ++total;
  }
  return static_cast<double>(*std::max_element(n.begin(), n.end())) / static_cast<double>(total);
}

TEST(BertRecipes, LearnsUnderTheMainRecipeFamilies) {
  const recipe_test::TinyRun run("bert");
  const fs::path corpus = fs::path(MANTISSA_SOURCE_DIR) / ".cache" / "data" / "austen.txt";
  for (const char* recipe : {"fp32", "bf16-amp", "fp8-delayed", "unit-fp32"}) {
    SCOPED_TRACE(recipe);
    train::TrainConfig c = run.config(recipe);
    if (fs::exists(corpus)) c.data = corpus.string();
    c.d_model = 64;
    c.seq_len = 32;
    c.batch_size = 16;
    c.steps = 60;
    c.warmup = 5;
    c.eval_batches = 8;
    if (std::string(recipe) == "fp32" || std::string(recipe) == "bf16-amp" || std::string(recipe) == "fp8-delayed")
      c.lr = 3e-3;
    auto s = train::build_session(c);
    const train::EvalMetrics before = s->trainer->evaluate();
    for (int64_t i = 0; i < c.steps; ++i) ASSERT_TRUE(std::isfinite(s->trainer->train_step().loss)) << "step " << i;
    const train::EvalMetrics after = s->trainer->evaluate();
    const double baseline = majority_share(*s->val);
    std::printf("%-12s %s: val loss %.3f -> %.3f, masked accuracy %.3f -> %.3f (most frequent byte %.3f)\n", recipe,
                fs::exists(corpus) ? "austen" : "generated", before.val_loss, after.val_loss, before.masked_accuracy,
                after.masked_accuracy, baseline);
    // From uniform guessing (ln 260 = 5.56 nats) to about the byte frequencies (3.0 on the
    // default corpus) in these few steps; using the context takes a few hundred (docs/bert.md).
    EXPECT_LT(after.val_loss, before.val_loss - 2.0);
    EXPECT_GE(after.masked_accuracy, baseline);
  }
}

}  // namespace
}  // namespace mantissa
