// The study's inspector section: recipes whose val bpc falls behind fp32 by
// more than the threshold (or that diverged) are inspected and get a section
// in the report; the others do not. Results are fed by hand so the gaps are
// known exactly; the inspections themselves run for real on a tiny GPT.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "mantissa/study/experiment.hpp"
#include "train/cli_util.hpp"

namespace fs = std::filesystem;
using namespace mantissa;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

report::RunResult finished(const std::string& recipe, double bpc) {
  report::RunResult r;
  r.id = "gpt-" + recipe + "-s1337";
  r.task = "gpt";
  r.recipe = recipe;
  r.seed = 1337;
  r.val_bpc = bpc;
  r.steps = r.steps_planned = 4;
  return r;
}

class ExperimentInspect : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mantissa_experiment_inspect_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "corpus.txt") << cli_test::word_corpus(8000, 5);
    o_.recipes = {"fp32", "fp8-noscale", "bf16-amp"};
    o_.mlp_recipes = {"none"};
    o_.tokens = 128;
    o_.layers = 1, o_.d_model = 16, o_.heads = 2, o_.seq_len = 16, o_.batch_size = 2;
    o_.threads = 1;
    o_.data = (dir_ / "corpus.txt").string();
    o_.out = (dir_ / "out").string();
    o_.inspect_steps = 3;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  study::ExperimentOptions o_;
};

}  // namespace

TEST_F(ExperimentInspect, OnlyRecipesBehindTheThresholdGetASection) {
  const study::ExperimentPlan plan = study::make_plan(o_);
  // fp8-noscale 10 % behind fp32, bf16-amp 1 % behind: (3.3 - 3) / 3 and (3.03 - 3) / 3.
  const std::vector<report::RunResult> results = {finished("fp32", 3.0), finished("fp8-noscale", 3.3),
                                                  finished("bf16-amp", 3.03)};
  o_.inspect_gap_pct = 2;
  const auto sections = study::inspect_laggards(o_, plan, results, nullptr);
  ASSERT_EQ(sections.size(), 1u);
  const report::InspectorSection& s = sections[0];
  EXPECT_EQ(s.recipe, "fp8-noscale");
  EXPECT_EQ(s.reason, "val bpc 10.00 % behind fp32");
  EXPECT_EQ(s.steps, 3);
  EXPECT_TRUE(s.note.empty()) << s.note;
  ASSERT_FALSE(s.top.empty());
  // Unscaled E4M3/E5M2 casts of a tiny model's gradients flush values: some top site underflows.
  bool underflowing_backward = false;
  for (const auto& t : s.top) underflowing_backward = underflowing_backward || (t.underflow > 0 && t.site.find("backward") != std::string::npos);
  EXPECT_TRUE(underflowing_backward);
  for (size_t i = 1; i < s.top.size(); ++i) EXPECT_GE(s.top[i - 1].lost, s.top[i].lost);
  ASSERT_GE(s.figures.size(), 2u);
  EXPECT_TRUE(fs::exists(dir_ / "out" / "inspect" / "fp8-noscale" / "ranking.json"));
  EXPECT_FALSE(fs::exists(dir_ / "out" / "inspect" / "bf16-amp"));

  report::ReportInput in;
  in.runs = results;
  in.inspections = sections;
  report::write_report((dir_ / "out").string(), in);
  const std::string md = slurp(dir_ / "out" / "report.md");
  EXPECT_NE(md.find("### fp8-noscale (val bpc 10.00 % behind fp32)"), std::string::npos) << md;
  EXPECT_EQ(md.find("### bf16-amp"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 | " + s.top[0].site + " |"), std::string::npos) << md;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "figures" / "inspect-fp8-noscale-sqnr_heatmap.svg"));
  EXPECT_EQ(slurp(dir_ / "out" / "figures" / "inspect-fp8-noscale-fractions.svg").rfind("<svg", 0), 0u);

  // A lower threshold takes bf16-amp too; a diverged seed is inspected whatever the gap.
  o_.inspect_gap_pct = 0.5;
  EXPECT_EQ(study::inspect_laggards(o_, plan, results, nullptr).size(), 2u);
  std::vector<report::RunResult> diverged = {finished("fp32", 3.0), finished("fp8-noscale", 3.0)};
  diverged[1].status = "diverged";
  diverged[1].diverged_at = 2;
  o_.inspect_gap_pct = 50;
  const auto d = study::inspect_laggards(o_, plan, diverged, nullptr);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].reason, "diverged in 1 of 1 seed(s), first at step 2");
  diverged[1].status = "ok";
  EXPECT_TRUE(study::inspect_laggards(o_, plan, diverged, nullptr).empty());
}

TEST_F(ExperimentInspect, StudyReportSaysWhenNothingIsInspectedOrItIsTurnedOff) {
  o_.recipes = {"fp32", "bf16-amp"};
  o_.inspect_gap_pct = 1000;  // nothing is that far behind
  study::run_experiment(o_, nullptr, false);
  EXPECT_NE(slurp(dir_ / "out" / "report.md").find("nothing to inspect"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "out" / "inspect"));
  const cli_test::Result r = cli_test::run("experiment --recipes fp32,bf16-amp --mlp-recipes none --tokens 128 --layers 1 "
                                           "--d-model 16 --heads 2 --seq-len 16 --batch-size 2 --threads 1 --no-inspect "
                                           "--resume --data " + o_.data + " --out " + o_.out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(slurp(dir_ / "out" / "report.md").find("turned off (--no-inspect)"), std::string::npos);
  EXPECT_EQ(cli_test::run("experiment --inspect-steps 0 --data " + o_.data + " --out " + o_.out).code, 2);
}
