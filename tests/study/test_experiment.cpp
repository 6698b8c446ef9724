// `mantissa experiment` end to end on a tiny GPT and MLP (synthetic corpus
// and a synthetic IDX set, a few steps): the report has every row and its
// numbers agree with the runs' own metrics files (also for the BERT
// masked-LM table of --model bert); --resume skips finished runs; bad flags exit 2 naming the flag; the plan gives unit-scaled recipes
// the unit learning rate; an interrupt abandons the current run.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "mantissa/recipe/recipe.hpp"
#include "mantissa/study/experiment.hpp"
#include "train/cli_util.hpp"

namespace fs = std::filesystem;
using mantissa::study::ExperimentOptions;

namespace {

using cli_test::Result;
using cli_test::run;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void put_be32(std::string& s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

// An IDX set (uncompressed) where class k lights up row band k: learnable.
void write_idx_set(const fs::path& dir, const std::string& prefix, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string images, labels;
  put_be32(images, 0x803);
  put_be32(images, static_cast<uint32_t>(n));
  put_be32(images, 28);
  put_be32(images, 28);
  put_be32(labels, 0x801);
  put_be32(labels, static_cast<uint32_t>(n));
  for (int i = 0; i < n; ++i) {
    const int k = static_cast<int>(rng() % 10);
    labels += static_cast<char>(k);
    for (int p = 0; p < 28 * 28; ++p) images += static_cast<char>(p / 28 / 2 == k ? 200 + rng() % 50 : rng() % 40);
  }
  std::ofstream(dir / (prefix + "-images-idx3-ubyte"), std::ios::binary) << images;
  std::ofstream(dir / (prefix + "-labels-idx1-ubyte"), std::ios::binary) << labels;
}

class Experiment : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mantissa_experiment_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "fmnist");
    const std::string text = cli_test::word_corpus(8000, 5);
    std::ofstream(dir_ / "corpus.txt") << text;
    write_idx_set(dir_ / "fmnist", "train", 256, 1);
    write_idx_set(dir_ / "fmnist", "t10k", 64, 2);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // 2 GPT recipes, 1 MLP recipe, a few steps each.
  std::string tiny(const std::string& out) const {
    return "experiment --recipes fp32,bf16-amp --mlp-recipes fp32 --tokens 320 --layers 1 --d-model 16 "
           "--heads 2 --seq-len 16 --batch-size 2 --mlp-steps 6 --threads 1 --data " +
           path("corpus.txt") + " --mlp-data " + path("fmnist") + " --out " + path(out);
  }
  void expect_usage_error(const Result& r, const std::string& needle) {
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.out;
  }
  fs::path dir_;
};

}  // namespace

TEST_F(Experiment, TinyStudyWritesReportWithEveryRowThenResumeSkipsFinishedRuns) {
  const Result r = run(tiny("out"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string md = slurp(dir_ / "out" / "report.md");
  const std::string html = slurp(dir_ / "out" / "report.html");
  for (const char* recipe : {"fp32", "bf16-amp"}) {
    const fs::path run_dir = dir_ / "out" / "runs" / (std::string("gpt-") + recipe + "-s1337");
    const auto result = nlohmann::json::parse(slurp(run_dir / "result.json"));
    EXPECT_EQ(result["status"], "ok");
    EXPECT_EQ(result["steps"], 10);  // 320 tokens / (2 x 16) per step
    // Independent check: the last validation line of the run's own metrics file.
    std::ifstream metrics(run_dir / "metrics.jsonl");
    double last_bpc = NAN, last_loss = NAN;
    for (std::string line; std::getline(metrics, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("val_bpc")) {
        last_bpc = j["val_bpc"].get<double>();
        last_loss = j["val_loss"].get<double>();
      }
    }
    EXPECT_DOUBLE_EQ(result["val_bpc"].get<double>(), last_bpc);
    EXPECT_NEAR(last_bpc, last_loss / std::log(2.0), 1e-9);
    EXPECT_GT(last_bpc, 0.5);
    EXPECT_LT(last_bpc, 8.0);
    char cell[64];
    std::snprintf(cell, sizeof cell, "| %s | %.3f |", recipe, last_bpc);
    EXPECT_NE(md.find(cell), std::string::npos) << cell << "\n" << md;
  }
  const auto mlp = nlohmann::json::parse(slurp(dir_ / "out" / "runs" / "mlp-fp32-s1337" / "result.json"));
  const double acc = mlp["accuracy"].get<double>();
  EXPECT_GE(acc, 0.0);
  EXPECT_LE(acc, 1.0);
  char mlp_cell[64];
  std::snprintf(mlp_cell, sizeof mlp_cell, "| fp32 | %.2f |", 100.0 * acc);
  EXPECT_NE(md.find(mlp_cell), std::string::npos) << md;
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir_ / "out" / "figures" / "val_curves.svg"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "figures" / "grad_exponents.svg"));
  EXPECT_EQ(slurp(dir_ / "out" / "figures" / "val_curves.svg").rfind("<svg", 0), 0u);
  EXPECT_NE(r.out.find("3 runs trained, 0 kept"), std::string::npos) << r.out;

  const auto before = fs::last_write_time(dir_ / "out" / "runs" / "gpt-fp32-s1337" / "result.json");
  const Result again = run(tiny("out") + " --resume");
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("0 runs trained, 3 kept from earlier"), std::string::npos) << again.out;
  EXPECT_EQ(fs::last_write_time(dir_ / "out" / "runs" / "gpt-fp32-s1337" / "result.json"), before);
  EXPECT_NE(slurp(dir_ / "out" / "report.md").find("| bf16-amp |"), std::string::npos);

  // A different token budget is a different run: --resume trains it again.
  const Result changed = run(tiny("out") + " --resume --tokens 352 --mlp-recipes none");
  ASSERT_EQ(changed.code, 0) << changed.out;
  EXPECT_NE(changed.out.find("2 runs trained, 0 kept"), std::string::npos) << changed.out;
}

// --model bert: the text task is BERT's masked LM; its table gives bits per
// masked character and masked-token accuracy, each the run's last evaluation.
TEST_F(Experiment, BertStudyWritesTheMaskedLmTable) {
  // umup-fp32: GPT only, reported as not available without failing the study.
  const Result r = run("experiment --model bert --recipes fp32,unit-fp32,umup-fp32 --mlp-recipes none --tokens 320 --layers 1 "
                       "--d-model 16 --heads 2 --seq-len 16 --batch-size 2 --threads 1 --no-inspect --data " +
                       path("corpus.txt") + " --out " + path("bert"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string md = slurp(dir_ / "bert" / "report.md");
  EXPECT_NE(md.find("## BERT masked LM: recipe by recipe"), std::string::npos) << md;
  EXPECT_EQ(md.find("## Character-level GPT"), std::string::npos) << md;
  double fp32_bpc = NAN;
  for (const char* recipe : {"fp32", "unit-fp32"}) {
    const fs::path run_dir = dir_ / "bert" / "runs" / (std::string("bert-") + recipe + "-s1337");
    const auto result = nlohmann::json::parse(slurp(run_dir / "result.json"));
    EXPECT_EQ(result["status"], "ok");
    std::ifstream metrics(run_dir / "metrics.jsonl");
    double bpc = NAN, loss = NAN, acc = NAN;
    std::string model;
    for (std::string line; std::getline(metrics, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("run")) model = j["run"]["model"]["model_type"].get<std::string>();
      if (j.contains("val_bpc")) {
        bpc = j["val_bpc"].get<double>();
        loss = j["val_loss"].get<double>();
        acc = j["val_masked_accuracy"].get<double>();
      }
    }
    EXPECT_EQ(model, "bert");
    EXPECT_DOUBLE_EQ(result["val_bpc"].get<double>(), bpc);
    EXPECT_DOUBLE_EQ(result["accuracy"].get<double>(), acc);
    EXPECT_NEAR(bpc, loss / std::log(2.0), 1e-9);
    EXPECT_GT(bpc, 0.5);
    EXPECT_LT(bpc, 8.0);
    EXPECT_GT(acc, 0.0);
    EXPECT_LE(acc, 1.0);
    if (std::string(recipe) == "fp32") fp32_bpc = bpc;
    char gap[32] = "—";
    if (std::string(recipe) != "fp32") std::snprintf(gap, sizeof gap, "%+.2f %%", 100.0 * (bpc - fp32_bpc) / fp32_bpc);
    char cell[160];
    std::snprintf(cell, sizeof cell, "| %s | %.3f | %s | %.2f | no |", recipe, bpc,
                  std::string(recipe) == "fp32" ? "+0.00 %" : gap, 100.0 * acc);
    EXPECT_NE(md.find(cell), std::string::npos) << cell << "\n" << md;
  }
  EXPECT_NE(md.find("| umup-fp32 | not available: "), std::string::npos) << md;
  EXPECT_TRUE(fs::exists(dir_ / "bert" / "figures" / "bert_curves.svg"));
}

// The last evaluation's (bits per masked character, masked-token accuracy) of one run, from its metrics file.
std::pair<double, double> last_bert_eval(const fs::path& run_dir) {
  std::ifstream metrics(run_dir / "metrics.jsonl");
  double bpc = NAN, acc = NAN;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("val_bpc")) {
      bpc = j["val_bpc"].get<double>();
      acc = j["val_masked_accuracy"].get<double>();
    }
  }
  return {bpc, acc};
}

// "m ± s" with the sample standard deviation, as the report prints it.
std::string mean_pm(double a, double b, int decimals) {
  const double m = (a + b) / 2, sd = std::sqrt((a - m) * (a - m) + (b - m) * (b - m));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f ± %.*f", decimals, m, decimals, sd);
  return buf;
}

TEST_F(Experiment, BertStudyFillsThePaperShapedTable) {
  const Result r = run("experiment --model bert --recipes fp32,unit-fp16,unit-fp8 --mlp-recipes none --seeds 2 "
                       "--tokens 320 --layers 1 --d-model 16 --heads 2 --seq-len 16 --batch-size 2 --threads 1 "
                       "--lr-standard 0.01 --no-inspect --data " + path("corpus.txt") + " --out " + path("bertpaper"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string md = slurp(dir_ / "bertpaper" / "report.md");
  ASSERT_NE(md.find("### Laid out like the unit-scaling paper (Blake et al. 2023, BERT)"), std::string::npos) << md;
  std::map<std::string, std::string> cell;  // recipe -> expected cell
  for (const char* recipe : {"fp32", "unit-fp16", "unit-fp8"}) {
    std::vector<std::pair<double, double>> evals;
    for (const auto& e : fs::directory_iterator(dir_ / "bertpaper" / "runs"))
      if (e.path().filename().string().rfind(std::string("bert-") + recipe + "-s", 0) == 0)
        evals.push_back(last_bert_eval(e.path()));
    ASSERT_EQ(evals.size(), 2u) << recipe;
    for (const auto& [bpc, acc] : evals) {
      ASSERT_TRUE(std::isfinite(bpc) && bpc < 8.0) << recipe;  // no seed diverged
      ASSERT_TRUE(acc >= 0.0 && acc <= 1.0) << recipe;
    }
    cell[recipe] = mean_pm(100 * evals[0].second, 100 * evals[1].second, 2) + " % / " +
                   mean_pm(evals[0].first, evals[1].first, 3);
  }
  const std::string prefix = ", masked-token accuracy % / bits per masked character | ";
  const std::string regular = "| mantissa: BERT regular" + prefix + cell["fp32"] + " | not run | not run |";
  const std::string unit = "| mantissa: BERT unit" + prefix + "not run | " + cell["unit-fp16"] + " | " + cell["unit-fp8"] + " |";
  EXPECT_NE(md.find(regular), std::string::npos) << regular << "\n" << md;
  EXPECT_NE(md.find(unit), std::string::npos) << unit << "\n" << md;
  EXPECT_EQ(md.find("Blake et al. 2023, character LM"), std::string::npos) << md;  // the GPT's paper table
}

TEST_F(Experiment, PostNormStudyFillsThePapersPostNormRow) {
  const Result r = run("experiment --norm post --recipes fp32 --mlp-recipes none --tokens 320 --layers 1 --d-model 16 "
                       "--heads 2 --seq-len 16 --batch-size 2 --threads 1 --no-inspect --data " +
                       path("corpus.txt") + " --out " + path("post"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string md = slurp(dir_ / "post" / "report.md");
  const size_t ours = md.find("| mantissa: GPT post-norm, Jane Austen (val bpc) |");
  ASSERT_NE(ours, std::string::npos) << md;
  EXPECT_EQ(md.find("| mantissa: GPT pre-norm"), std::string::npos) << md;
  EXPECT_LT(md.find("| paper: attention, post-norm"), ours);
  EXPECT_LT(ours, md.find("| paper: attention, pre-norm"));
  EXPECT_EQ(md.find("Blake et al. 2023, BERT"), std::string::npos) << md;  // BERT studies only
  // The run really was post-norm: its spec says so.
  const auto spec = nlohmann::json::parse(slurp(dir_ / "post" / "runs" / "gpt-fp32-s1337" / "spec.json"));
  EXPECT_EQ(spec["config"].value("norm", ""), "post") << spec.dump();
}

TEST_F(Experiment, BadFlagsExitWithUsageError) {
  expect_usage_error(run("experiment --preset slow"), "--preset");
  expect_usage_error(run("experiment --seeds 0"), "--seeds");
  expect_usage_error(run("experiment --tokens -5"), "--tokens");
  expect_usage_error(run("experiment --recipes fp32,,bf16-amp --data " + path("corpus.txt")), "--recipes");
  expect_usage_error(run("experiment --no-such-flag"), "--no-such-flag");
  expect_usage_error(run(tiny("out2") + " --data " + path("missing.txt")), "missing.txt");
  std::ofstream(dir_ / "a_file") << "x";
  expect_usage_error(run(tiny("a_file/out")), "--out");
}

TEST(ExperimentPlan, LearningRateFollowsParametrisationAndUnknownRecipesAreRefused) {
  mantissa::recipe::Recipe unit = mantissa::recipe::find_recipe("fp32");
  unit.name = "test-unit-parametrised";
  unit.parametrisation = mantissa::recipe::Parametrisation::unit;
  mantissa::recipe::register_recipe(unit);
  ExperimentOptions o;
  o.recipes = {"fp32", "test-unit-parametrised", "missing-recipe"};
  // A recipe the user names must exist.
  EXPECT_THROW(mantissa::study::make_plan(o), std::invalid_argument);
  o.recipes.pop_back();
  o.mlp_recipes = {"none"};
  o.seeds = 2;
  o.tokens = 1000;
  o.seq_len = 10;
  o.batch_size = 5;
  const auto plan = mantissa::study::make_plan(o);
  ASSERT_EQ(plan.runs.size(), 4u);  // 2 recipes x 2 seeds, no MLP
  EXPECT_EQ(plan.runs[0].config.steps, 20);  // 1000 / (5 x 10)
  EXPECT_EQ(plan.runs[0].seed, 1337);
  EXPECT_EQ(plan.runs[1].seed, 1338);
  EXPECT_EQ(plan.runs[1].config.seed, 1338);
  EXPECT_DOUBLE_EQ(plan.runs[0].config.lr, 1.0 / 1024);  // the paper's regular AdamW rate, 2^-10
  EXPECT_DOUBLE_EQ(plan.runs[2].config.lr, 1.0 / 2);     // unit AdamW 2^-1
  EXPECT_EQ(plan.runs[2].parametrisation, "unit");
  EXPECT_TRUE(plan.runs[2].available);
  o.preset = "nope";
  EXPECT_THROW(mantissa::study::make_plan(o), std::invalid_argument);
}

TEST_F(Experiment, InterruptAbandonsTheRunningRun) {
  ExperimentOptions o;
  o.recipes = {"fp32"};
  o.mlp_recipes = {"none"};
  o.tokens = 320;
  o.layers = 1;
  o.d_model = 16;
  o.heads = 2;
  o.seq_len = 16;
  o.batch_size = 2;
  o.data = path("corpus.txt");
  auto plan = mantissa::study::make_plan(o);
  plan.runs[0].config.data = path("corpus.txt");
  fs::create_directories(dir_ / "run");
  mantissa::study::request_interrupt();
  EXPECT_THROW(mantissa::study::execute_run(plan.runs[0], path("run"), {}), mantissa::study::ExperimentInterrupted);
  mantissa::study::clear_interrupt();
  const auto r = mantissa::study::execute_run(plan.runs[0], path("run"), {});
  EXPECT_EQ(r.status, "ok");
  EXPECT_EQ(r.steps, 10);
}
