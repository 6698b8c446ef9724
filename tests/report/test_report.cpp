// The study report on synthetic run results: every number in the tables is
// checked against hand arithmetic (mean, sample std, gap to fp32, divergence),
// the JSON round trip keeps NaN as NaN, and the written files hold the rows,
// the published numbers and well-formed inline figures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mantissa/report/report.hpp"

namespace fs = std::filesystem;
using namespace mantissa::report;

namespace {

RunResult gpt(const std::string& recipe, int64_t seed, double bpc, double train_loss = 2.0) {
  RunResult r;
  r.id = "gpt-" + recipe + "-s" + std::to_string(seed);
  r.task = "gpt";
  r.recipe = recipe;
  r.seed = seed;
  r.val_bpc = bpc;
  r.val_loss = bpc * std::log(2.0);
  r.final_train_loss = train_loss;
  r.steps = r.steps_planned = 100;
  r.step_ms = 10.0 * static_cast<double>(seed);
  r.tokens_per_s = 1000.0 * static_cast<double>(seed);
  r.peak_memory_bytes = 1048576.0 * static_cast<double>(seed);
  for (int s = 10; s <= 100; s += 10) r.val_curve.push_back({s, bpc + 1.0 / s});
  return r;
}

RunResult mlp(const std::string& recipe, int64_t seed, double accuracy, double val_loss = 0.5) {
  RunResult r;
  r.id = "mlp-" + recipe + "-s" + std::to_string(seed);
  r.task = "mlp";
  r.recipe = recipe;
  r.seed = seed;
  r.accuracy = accuracy;
  r.val_loss = val_loss;
  r.val_curve = {{5, 1.0}, {10, val_loss}};
  return r;
}

const RecipeSummary& row(const std::vector<RecipeSummary>& rows, const std::string& task, const std::string& recipe) {
  for (const auto& s : rows)
    if (s.task == task && s.recipe == recipe) return s;
  throw std::runtime_error("no row " + task + "/" + recipe);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<RunResult> study() {
  std::vector<RunResult> runs = {gpt("fp32", 1, 2.0, 1.40), gpt("fp32", 2, 2.2, 1.50), gpt("fp16-amp", 1, 2.1),
                                 gpt("fp16-amp", 2, 2.31)};
  RunResult nan_run = gpt("fp16-amp-noscale", 1, std::nan(""));
  RunResult bad_run = gpt("fp16-amp-noscale", 2, 9.0);  // worse than 8 bits per byte: learnt nothing
  RunResult stopped = gpt("fp16-pure", 1, 2.5);
  stopped.status = "diverged";
  stopped.diverged_at = 37;
  RunResult na;
  na.id = "gpt-unit-fp8-s1";
  na.task = "gpt";
  na.recipe = "unit-fp8";
  na.seed = 1;
  na.status = "not-available";
  na.error = "recipe 'unit-fp8' is not registered in this build";
  runs.insert(runs.end(), {nan_run, bad_run, stopped, na, mlp("fp32", 1, 0.85), mlp("fp32", 2, 0.87),
                           mlp("bf16-amp", 1, 0.84), mlp("fp16-amp-noscale", 1, 0.10, 2.4)});
  runs[1].skipped_steps = 3;  // fp32 seed 2
  return runs;
}

}  // namespace

TEST(ReportStats, MeanAndSampleStdAgainstHandArithmetic) {
  const MeanStd m = mean_std({2.0, 2.5, 3.0});
  EXPECT_EQ(m.n, 3);
  EXPECT_DOUBLE_EQ(m.mean, 2.5);
  EXPECT_DOUBLE_EQ(m.std, 0.5);  // sqrt((0.25 + 0 + 0.25) / 2)
  const MeanStd with_nan = mean_std({1.0, std::nan(""), 3.0, INFINITY});
  EXPECT_EQ(with_nan.n, 2);
  EXPECT_DOUBLE_EQ(with_nan.mean, 2.0);
  EXPECT_DOUBLE_EQ(with_nan.std, std::sqrt(2.0));
  const MeanStd one = mean_std({4.0});
  EXPECT_EQ(one.n, 1);
  EXPECT_DOUBLE_EQ(one.mean, 4.0);
  EXPECT_TRUE(std::isnan(one.std));
  EXPECT_EQ(mean_std({}).n, 0);
}

TEST(ReportStats, DivergenceDetection) {
  const double t = divergence_threshold("gpt");
  EXPECT_DOUBLE_EQ(t, 8.0);
  EXPECT_DOUBLE_EQ(divergence_threshold("mlp"), std::log(10.0));
  EXPECT_FALSE(is_diverged(gpt("a", 1, 7.9), t));
  EXPECT_TRUE(is_diverged(gpt("a", 1, 8.5), t));
  EXPECT_TRUE(is_diverged(gpt("a", 1, std::nan("")), t));
  EXPECT_TRUE(is_diverged(gpt("a", 1, INFINITY), t));
  RunResult stopped = gpt("a", 1, 2.0);
  stopped.status = "diverged";
  EXPECT_TRUE(is_diverged(stopped, t));
  EXPECT_TRUE(is_diverged(mlp("a", 1, 0.1, 2.4), std::log(10.0)));   // 2.4 > ln 10 = 2.3026
  EXPECT_FALSE(is_diverged(mlp("a", 1, 0.8, 0.6), std::log(10.0)));
  RunResult na = gpt("a", 1, std::nan(""));
  na.status = "not-available";
  EXPECT_FALSE(is_diverged(na, t));  // never ran
}

TEST(ReportStats, SummaryRowsMatchHandArithmetic) {
  const auto rows = summarize(study());
  const RecipeSummary& fp32 = row(rows, "gpt", "fp32");
  EXPECT_EQ(fp32.metric.n, 2);
  EXPECT_NEAR(fp32.metric.mean, 2.1, 1e-12);
  EXPECT_NEAR(fp32.metric.std, std::sqrt(0.02), 1e-12);  // ((0.1)^2 + (0.1)^2) / 1
  EXPECT_NEAR(fp32.gap_pct, 0.0, 1e-12);
  EXPECT_NEAR(fp32.train_loss.mean, 1.45, 1e-12);
  EXPECT_DOUBLE_EQ(fp32.skipped_steps, 1.5);             // (0 + 3) / 2
  EXPECT_DOUBLE_EQ(fp32.step_ms, 15.0);                  // (10 + 20) / 2
  EXPECT_DOUBLE_EQ(fp32.tokens_per_s, 1500.0);
  EXPECT_DOUBLE_EQ(fp32.peak_memory_bytes, 2097152.0);   // max over seeds

  const RecipeSummary& amp = row(rows, "gpt", "fp16-amp");
  EXPECT_NEAR(amp.metric.mean, 2.205, 1e-12);
  EXPECT_NEAR(amp.gap_pct, 100.0 * (2.205 - 2.1) / 2.1, 1e-9);  // 5 %
  EXPECT_NEAR(amp.gap_pct, 5.0, 1e-9);
  EXPECT_EQ(amp.diverged, 0);

  const RecipeSummary& noscale = row(rows, "gpt", "fp16-amp-noscale");
  EXPECT_EQ(noscale.finished, 2);
  EXPECT_EQ(noscale.diverged, 2);
  EXPECT_EQ(noscale.metric.n, 0);
  EXPECT_TRUE(std::isnan(noscale.gap_pct));

  const RecipeSummary& pure = row(rows, "gpt", "fp16-pure");
  EXPECT_EQ(pure.diverged, 1);
  EXPECT_EQ(pure.first_diverged_at, 37);

  const RecipeSummary& na = row(rows, "gpt", "unit-fp8");
  EXPECT_EQ(na.finished, 0);
  EXPECT_EQ(na.status, "not-available");

  const RecipeSummary& mfp32 = row(rows, "mlp", "fp32");
  EXPECT_NEAR(mfp32.metric.mean, 86.0, 1e-9);  // accuracy in %
  const RecipeSummary& mbf16 = row(rows, "mlp", "bf16-amp");
  EXPECT_NEAR(mbf16.gap_pct, -2.0, 1e-9);  // points: 84 - 86
  EXPECT_EQ(row(rows, "mlp", "fp16-amp-noscale").diverged, 1);
}

TEST(ReportStats, TablesShowTheComputedNumbers) {
  const auto rows = summarize(study());
  const std::string main = main_table_md(rows);
  EXPECT_NE(main.find("| fp32 | 2.100 ± 0.141 | +0.00 % | no | 1.5 | 15.0 | 1500 | 2.0 |"), std::string::npos) << main;
  EXPECT_NE(main.find("| fp16-amp | 2.205 ± 0.148 | +5.00 % | no |"), std::string::npos) << main;
  // finished runs whose metric is NaN / past 8 bpc: diverged at their first such validation point
  EXPECT_NE(main.find("| fp16-amp-noscale | — | — | **yes** (step 10) |"), std::string::npos) << main;
  EXPECT_NE(main.find("| fp16-pure | — | — | **yes** (step 37) |"), std::string::npos) << main;
  EXPECT_NE(main.find("| unit-fp8 | not available: recipe 'unit-fp8' is not registered"), std::string::npos) << main;
  const std::string m = mlp_table_md(rows);
  EXPECT_NE(m.find("| bf16-amp | 84.00 | -2.00 |"), std::string::npos) << m;
  const std::string unit = unit_paper_table_md(rows);
  EXPECT_NE(unit.find("| 1.661 | 1.567 | 1.587 | 1.582 | 1.562 |"), std::string::npos) << unit;  // the paper's pre-norm row
  EXPECT_NE(unit.find("| diverged | not run | 2.205 ± 0.148 | 2.100 ± 0.141 | not run |"), std::string::npos) << unit;
  // A pre-norm study's row sits under the paper's pre-norm row; a post-norm one's under the post-norm row.
  const std::string ours_pre = "| mantissa: GPT pre-norm, Jane Austen (val bpc) |";
  const std::string ours_post = "| mantissa: GPT post-norm, Jane Austen (val bpc) |";
  const std::string paper_pre = "| paper: attention, pre-norm", paper_post = "| paper: attention, post-norm";
  EXPECT_EQ(unit.find(ours_post), std::string::npos) << unit;
  EXPECT_LT(unit.find(paper_post), unit.find(paper_pre));
  EXPECT_LT(unit.find(paper_pre), unit.find(ours_pre));
  const std::string post = unit_paper_table_md(rows, true);
  EXPECT_EQ(post.find(ours_pre), std::string::npos) << post;
  EXPECT_LT(post.find(paper_post), post.find(ours_post));
  EXPECT_LT(post.find(ours_post), post.find(paper_pre)) << post;
  EXPECT_NE(post.find(ours_post + " diverged | not run | 2.205 ± 0.148 | 2.100 ± 0.141 | not run |"), std::string::npos)
      << post;
  const std::string sc = scalify_table_md(rows);
  EXPECT_NE(sc.find("| FP32 | 2.87 | `fp32` | 1.450 ± 0.071 | 2.100 ± 0.141 |"), std::string::npos) << sc;
  EXPECT_NE(sc.find("| + FP16 optimizer state, rescaled gradients | 2.93 |"), std::string::npos) << sc;
}

TEST(ReportStats, BertPaperTableCellsAndMissingRecipes) {
  auto bert = [](const std::string& recipe, int64_t seed, double bpc, double accuracy) {
    RunResult r = gpt(recipe, seed, bpc);
    r.id = "bert-" + recipe + "-s" + std::to_string(seed);
    r.task = "bert";
    r.accuracy = accuracy;
    return r;
  };
  RunResult na = bert("fp16-amp", 1, std::nan(""), std::nan(""));
  na.status = "not-available";
  na.error = "not in this build";
  // A GPT run of a BERT recipe name must not fill a BERT cell.
  const std::vector<RunResult> runs = {bert("fp32", 1, 3.0, 0.40), bert("fp32", 2, 3.2, 0.42), na,
                                       bert("unit-fp8", 1, std::nan(""), std::nan("")),
                                       bert("unit-fp16", 1, 3.25, 0.375), gpt("fp8-delayed", 1, 2.0)};
  const std::string t = bert_paper_table_md(summarize(runs));
  // mean 41 %, sample std sqrt(2) = 1.41 points; bpc mean 3.1, std 0.141
  EXPECT_NE(t.find("| mantissa: BERT regular, masked-token accuracy % / bits per masked character | "
                   "41.00 ± 1.41 % / 3.100 ± 0.141 | n/a | not run |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| mantissa: BERT unit, masked-token accuracy % / bits per masked character | "
                   "not run | 37.50 % / 3.250 | diverged |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| model | FP32 | FP16 | FP8 |"), std::string::npos) << t;
  EXPECT_NE(t.find("SQuAD v1.1 F1 (another task and metric) | 90.9 | 90.93 | 90.69 |"), std::string::npos) << t;
  EXPECT_NE(t.find("| mantissa recipe, unit | `unit-fp32` | `unit-fp16` | `unit-fp8` |"), std::string::npos) << t;
  EXPECT_NE(t.find("| mantissa recipe, regular | `fp32` | `fp16-amp` | `fp8-delayed` |"), std::string::npos) << t;
  // The paper's rows above ours, regular before unit.
  EXPECT_LT(t.find("| paper: BERT-large regular"), t.find("| paper: BERT-large unit"));
  EXPECT_LT(t.find("| paper: BERT-large unit"), t.find("| mantissa: BERT regular"));
}

TEST(ReportJson, RoundTripKeepsNumbersAndNaN) {
  RunResult r = gpt("fp16-amp", 2, 2.31);
  r.accuracy = std::nan("");
  r.loss_scale_curve = {{1, 65536.0}, {2, 32768.0}};
  r.grad_exponents.push_back({"grads", -40, {1, 2, 3}, 4, 5});
  const RunResult b = run_result_from_json(to_json(r));
  EXPECT_EQ(b.id, r.id);
  EXPECT_EQ(b.seed, 2);
  EXPECT_DOUBLE_EQ(b.val_bpc, 2.31);
  EXPECT_TRUE(std::isnan(b.accuracy));
  ASSERT_EQ(b.val_curve.size(), r.val_curve.size());
  EXPECT_DOUBLE_EQ(b.val_curve[3].value, r.val_curve[3].value);
  ASSERT_EQ(b.loss_scale_curve.size(), 2u);
  EXPECT_DOUBLE_EQ(b.loss_scale_curve[1].value, 32768.0);
  ASSERT_EQ(b.grad_exponents.size(), 1u);
  EXPECT_EQ(b.grad_exponents[0].counts, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(b.grad_exponents[0].nonfinite, 5);
  EXPECT_THROW(run_result_from_json("{\"id\": 3}"), std::invalid_argument);
  EXPECT_THROW(run_result_from_json("not json"), std::invalid_argument);
  // A float where an integer goes (converting 1e93 to int64 is undefined
  // behaviour), or an integer beyond int64, is refused by name.
  const nlohmann::json good = nlohmann::json::parse(to_json(r));
  const std::pair<std::string, nlohmann::json> bad[] = {
      {"seed", 1.28778e93}, {"steps", 2.5}, {"tokens", 18446744073709551615u}, {"val_curve", {{1e300, 7.9}}}};
  for (const auto& [key, value] : bad) {
    nlohmann::json j = good;
    j[key] = value;
    try {
      run_result_from_json(j.dump());
      ADD_FAILURE() << key << " = " << value << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(key == "val_curve" ? "a step of 'val_curve'" : "'" + key + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(ReportWrite, FilesHoldTablesAndInlineFigures) {
  const fs::path dir = fs::temp_directory_path() / ("mantissa_report_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ReportInput in;
  in.runs = study();
  in.runs[0].grad_exponents.push_back({"test gradients", -30, std::vector<int64_t>(35, 10), 7, 0});
  in.runs[2].loss_scale_curve = {{1, 65536.0}, {50, 32768.0}, {100, 65536.0}};
  in.command = "mantissa experiment --preset quick";
  in.versions = {{"oneDNN", "2.6.3"}};
  in.machine = {{"cpu", "test cpu"}};
  in.scale_plot_note = "not in this build";
  const ReportFiles f = write_report(dir.string(), in);
  const std::string md = slurp(f.markdown), html = slurp(f.html);
  EXPECT_NE(md.find("| fp16-amp | 2.205 ± 0.148 | +5.00 % |"), std::string::npos);
  EXPECT_NE(md.find("mantissa experiment --preset quick"), std::string::npos);
  EXPECT_NE(md.find("| oneDNN | 2.6.3 |"), std::string::npos);
  EXPECT_NE(md.find("Per-op scale plot: not in this build"), std::string::npos);
  EXPECT_EQ(md.find("Blake et al. 2023, BERT"), std::string::npos) << "the BERT paper table in a study without BERT";
  EXPECT_NE(html.find("<td>2.205 ± 0.148</td>"), std::string::npos);
  ASSERT_EQ(f.figures.size(), 4u);  // val curves, mlp curves, gradient exponents, loss scale
  size_t inline_svgs = 0;
  for (size_t at = 0; (at = html.find("<svg", at)) != std::string::npos; ++at) ++inline_svgs;
  EXPECT_EQ(inline_svgs, 4u);
  for (const auto& fig : f.figures) {
    const std::string svg = slurp(fig);
    EXPECT_EQ(svg.rfind("<svg", 0), 0u) << fig;
    EXPECT_NE(svg.find("</svg>"), std::string::npos) << fig;
    EXPECT_NE(md.find("figures/" + fs::path(fig).filename().string()), std::string::npos) << fig;
  }
  EXPECT_NE(slurp(dir / "figures" / "val_curves.svg").find("fp16-amp"), std::string::npos);
  fs::remove_all(dir);
}
