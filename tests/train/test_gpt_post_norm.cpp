// The post-norm GPT (`--norm post`) through the session and analysis paths:
// the unit-scaled one has every tracked tensor's RMS within [1/2, 2] at
// initialisation, forward and backward (paper rules, as the pre-norm unit GPT
// and BERT); fp32 and unit-fp32 post-norm GPTs train (the loss falls); --norm
// is refused where it does not apply; `experiment --norm` reaches every text run.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "mantissa/nn/gpt.hpp"
#include "mantissa/analyse/analyse.hpp"
#include "mantissa/study/experiment.hpp"
#include "mantissa/train/session.hpp"
#include "temp_dir.hpp"
#include "train/cli_util.hpp"
#include "train/small_gpt.hpp"

using namespace mantissa;

namespace {

// A temporary directory holding generated words (text.txt).
struct TextDir : TempDir {
  TextDir() : TempDir("gpt_post_norm") { write("text.txt", cli_test::word_corpus(40000, 9)); }
};

train::TrainConfig config(const TextDir& d, const std::string& recipe) {
  train::TrainConfig c = train_test::small_gpt(d / "text.txt", recipe);
  c.norm = "post";
  return c;
}

}  // namespace

TEST(GptPostNorm, UnitGptIsUnitScaledAtInit) {
  TextDir d;
  analyse::AnalyseOptions o;
  o.config = config(d, "unit-fp32");
  o.config.set = {"unit.rule_set=paper"};
  const analyse::Analysis a = analyse::analyse(o);
  EXPECT_EQ(a.parametrisation, "unit");
  // embedding, 10 per block (qkv, sdpa, proj, residual, ln for each branch), logits; both passes.
  ASSERT_EQ(a.ops.rows().size(), 2u * (1 + 2 * 10 + 1));
  for (const auto& row : a.ops.rows()) {
    std::printf("%-18s %-8s rms %.3f\n", row.op.c_str(), unit::pass_name(row.pass), row.stats.rms);
    EXPECT_GE(row.stats.rms, 0.5) << row.op << " " << unit::pass_name(row.pass);
    EXPECT_LE(row.stats.rms, 2.0) << row.op << " " << unit::pass_name(row.pass);
  }
}

TEST(GptPostNorm, Fp32AndUnitTrain) {
  TextDir d;
  for (const char* recipe : {"fp32", "unit-fp32"}) {
    SCOPED_TRACE(recipe);
    train::TrainConfig c = config(d, recipe);
    c.d_model = 32;
    c.heads = 2;
    c.batch_size = 8;
    c.steps = 40;
    c.warmup = 5;
    c.eval_batches = 2;
    auto s = train::build_session(c);
    ASSERT_FALSE(static_cast<nn::GPT&>(*s->model).config().pre_norm);
    EXPECT_EQ(s->model->find("transformer.ln_f.weight"), nullptr);
    double first = 0, last = 0;
    for (int64_t k = 0; k < c.steps; ++k) {
      const double l = s->trainer->train_step().loss;
      ASSERT_TRUE(std::isfinite(l));
      if (k == 0) first = l;
      last = l;
    }
    EXPECT_NEAR(first, std::log(256.0), 0.3);
    // 40 steps: fp32 (lr 1e-3) falls by about 1.2 nats, unit-fp32 (lr 2^-1) by more.
    EXPECT_LT(last, first - 1.0) << "first " << first << " last " << last;
  }
}

TEST(GptPostNorm, NormIsRefusedWhereItDoesNotApply) {
  TextDir d;
  auto message = [&](train::TrainConfig c) -> std::string {
    try {
      train::build_session(c);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  train::TrainConfig c = config(d, "fp32");
  c.model = "llama";
  EXPECT_NE(message(c).find("--norm applies to --model gpt or bert"), std::string::npos) << message(c);
  c = config(d, "umup-fp32");
  EXPECT_NE(message(c).find("u-muP"), std::string::npos) << message(c);
  c = config(d, "fp32");
  c.norm = "middle";
  EXPECT_NE(message(c).find("--norm must be pre or post"), std::string::npos) << message(c);
}

TEST(GptPostNorm, ExperimentPassesNormToTheTextRuns) {
  study::ExperimentOptions o;
  o.norm = "post";
  o.recipes = {"fp32", "unit-fp32"};
  const study::ExperimentPlan plan = study::make_plan(o);
  int text = 0;
  for (const auto& r : plan.runs) {
    if (r.task != "gpt") continue;
    EXPECT_EQ(r.config.norm, "post") << r.id;
    ++text;
  }
  EXPECT_EQ(text, 2);
  o.norm = "sideways";
  EXPECT_THROW(study::make_plan(o), std::invalid_argument);
  o.norm = "post";
  o.model = "llama";
  EXPECT_THROW(study::make_plan(o), std::invalid_argument);
}
