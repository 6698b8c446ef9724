// Recipes that should train as well as their full-precision baseline do so on
// every text model: after a short run from the same initialisation and batches,
// each one's held-out loss is within a stated tolerance of its baseline's
// (standard recipes of fp32, unit recipes of unit-fp32). Mixed precision with
// bf16 or fp16 products keeps fp32 accumulation and must stay within 1%;
// FP8 and FP4 casts (per-tensor, block and propagated scales) within 5%.
// Both bounds sit above the same-seed differences of working recipes at this
// size and below what a recipe that loses updates costs: bf16-pure (bf16
// weights, no master copy) must fall outside the FP8 bound on the decoders.
// BERT's masked loss moves little from the byte frequencies in so few steps,
// so there the bounds are checked without that control.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "train/recipe_run.hpp"

namespace mantissa {
namespace {

struct Tracking {
  std::string recipe, baseline;
  double tolerance;  // relative to the baseline's held-out loss
};

const std::vector<Tracking> kTracking = {
    {"bf16-amp", "fp32", 0.01},       {"fp16-amp", "fp32", 0.01},    {"fp8-delayed", "fp32", 0.05},
    {"fp8-current", "fp32", 0.05},     {"mxfp8", "fp32", 0.05},        {"fp8-blockwise", "fp32", 0.05},
    {"scalify-fp8", "fp32", 0.05},     {"nvfp4", "fp32", 0.05},        {"unit-fp16", "unit-fp32", 0.01},
    {"unit-fp8", "unit-fp32", 0.05},
};

class RecipesTrackFp32 : public ::testing::TestWithParam<std::string> {
 protected:
  // Held-out loss after a short run: 4 layers, so FP4's bf16 first and last blocks leave two in FP4.
  double val_loss(const std::string& recipe) const {
    train::TrainConfig c = run_.config(recipe);
    c.layers = 4;
    c.seq_len = 32;
    c.batch_size = 8;
    c.steps = 120;
    c.warmup = 10;
    c.eval_batches = 4;
    c.eval_every = 0;
    if (recipe.rfind("unit-", 0) != 0) c.lr = 3e-3;  // unit recipes take their own default
    auto s = train::build_session(c);
    for (int64_t i = 0; i < c.steps; ++i) {
      const double loss = s->trainer->train_step().loss;
      if (!std::isfinite(loss)) return loss;
    }
    return s->trainer->evaluate().val_loss;
  }
  recipe_test::TinyRun run_{GetParam()};
};

TEST_P(RecipesTrackFp32, HeldOutLossWithinTolerance) {
  const std::string model = GetParam();
  const double fp32 = val_loss("fp32"), unit32 = val_loss("unit-fp32");
  ASSERT_TRUE(std::isfinite(fp32) && std::isfinite(unit32));
  for (const Tracking& t : kTracking) {
    const double base = t.baseline == "fp32" ? fp32 : unit32, got = val_loss(t.recipe);
    std::printf("%-6s %-14s val loss %.4f  %s %.4f  (%+.2f%%, tolerance %.1f%%)\n", model.c_str(), t.recipe.c_str(), got,
                t.baseline.c_str(), base, 100 * (got / base - 1), 100 * t.tolerance);
    EXPECT_TRUE(std::isfinite(got)) << t.recipe;
    EXPECT_LE(std::fabs(got / base - 1), t.tolerance) << model << " " << t.recipe << ": " << got << " vs " << t.baseline
                                                      << " " << base;
  }
  // The runs really learn: the baselines end well below the uniform loss ln(256).
  EXPECT_LT(fp32, 0.7 * std::log(256.0));
  EXPECT_LT(unit32, 0.7 * std::log(256.0));
  if (model == "bert") return;
  const double pure = val_loss("bf16-pure");
  std::printf("%-6s %-14s val loss %.4f  fp32 %.4f  (%+.2f%%, must exceed 5%%)\n", model.c_str(), "bf16-pure", pure, fp32,
              100 * (pure / fp32 - 1));
  EXPECT_GT(pure / fp32 - 1, 0.05) << model << ": bf16-pure is expected to lose updates";
}

INSTANTIATE_TEST_SUITE_P(Models, RecipesTrackFp32, ::testing::Values("gpt", "llama", "bert"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace mantissa
