// Learning-rate sweeps in the report, on synthetic run results: the best rate
// of each recipe (lowest mean val bpc among rates where no seed diverged;
// highest accuracy for the MLP), the gap between best rates, the tables'
// numbers, and the figure's points (pixel positions recomputed from the
// plot's own axis maps).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "mantissa/io/files.hpp"
#include "mantissa/report/report.hpp"
#include "mantissa/report/svg.hpp"

namespace fs = std::filesystem;
using namespace mantissa::report;

namespace {

RunResult run(const std::string& recipe, double lr, int64_t seed, double bpc) {
  RunResult r;
  r.id = "gpt-" + recipe + "-lr" + lr_label(lr) + "-s" + std::to_string(seed);
  r.task = "gpt";
  r.recipe = recipe;
  r.seed = seed;
  r.lr = lr;
  r.val_bpc = bpc;
  r.steps = r.steps_planned = 100;
  r.val_curve = {{50, bpc + 0.5}, {100, bpc}};
  return r;
}

// fp32: best at 2^-10 (mean 2.05); unit-fp32: 2^-1 has the lowest seed (1.9)
// but its other seed diverged, so the best usable rate is 2^-2 (mean 2.15);
// fp16-pure diverges everywhere.
std::vector<RunResult> sweep_runs() {
  std::vector<RunResult> runs = {
      run("fp32", 0x1p-11, 1, 2.4),       run("fp32", 0x1p-11, 2, 2.6),      run("fp32", 0x1p-10, 1, 2.0),
      run("fp32", 0x1p-10, 2, 2.1),       run("fp32", 0x1p-9, 1, 2.2),       run("fp32", 0x1p-9, 2, 2.3),
      run("unit-fp32", 0x1p-3, 1, 2.5),   run("unit-fp32", 0x1p-3, 2, 2.7),  run("unit-fp32", 0x1p-2, 1, 2.1),
      run("unit-fp32", 0x1p-2, 2, 2.2),   run("unit-fp32", 0x1p-1, 1, 1.9),  run("unit-fp32", 0x1p-1, 2, 9.5),
      run("fp16-pure", 0x1p-10, 1, NAN),  run("fp16-pure", 0x1p-9, 1, NAN)};
  RunResult m1, m2;
  for (auto [m, lr, acc] : {std::tuple{&m1, 1e-3, 0.8}, std::tuple{&m2, 3e-3, 0.85}}) {
    m->task = "mlp";
    m->recipe = "fp32";
    m->seed = 1;
    m->lr = lr;
    m->accuracy = acc;
    m->val_loss = 0.5;
    m->val_curve = {{10, 0.5}};
  }
  runs.push_back(m1);
  runs.push_back(m2);
  return runs;
}

const SweepCurve& curve(const std::vector<SweepCurve>& c, const std::string& task, const std::string& recipe) {
  for (const auto& s : c)
    if (s.task == task && s.recipe == recipe) return s;
  throw std::runtime_error("no curve " + recipe);
}

}  // namespace

TEST(LrSweepReport, LabelsArePowersOfTwoOrShortestDecimals) {
  EXPECT_EQ(lr_label(0x1p-10), "2^-10");
  EXPECT_EQ(lr_label(1.0), "2^0");
  EXPECT_EQ(lr_label(2.0), "2^1");
  EXPECT_EQ(lr_label(3e-3), "0.003");
  EXPECT_EQ(lr_label(1e-3 * std::sqrt(2.0)), "0.0014142135623730952");
}

TEST(LrSweepReport, BestRateIsTheLowestMeanWhereNoSeedDiverged) {
  const auto c = lr_sweep(sweep_runs());
  ASSERT_EQ(c.size(), 4u);
  EXPECT_TRUE(is_sweep(c));
  const SweepCurve& fp32 = curve(c, "gpt", "fp32");
  ASSERT_EQ(fp32.points.size(), 3u);
  EXPECT_EQ(fp32.points[0].lr, 0x1p-11);
  EXPECT_NEAR(fp32.points[0].metric.mean, 2.5, 1e-12);
  EXPECT_NEAR(fp32.points[0].metric.std, std::sqrt(0.02), 1e-12);
  EXPECT_EQ(fp32.best_lr, 0x1p-10);
  EXPECT_NEAR(fp32.best.mean, 2.05, 1e-12);
  EXPECT_FALSE(fp32.best_at_edge);
  EXPECT_NEAR(fp32.gap_pct, 0.0, 1e-12);

  const SweepCurve& unit = curve(c, "gpt", "unit-fp32");
  EXPECT_EQ(unit.points[2].diverged, 1);  // 9.5 bpc: worse than guessing
  EXPECT_NEAR(unit.points[2].metric.mean, 1.9, 1e-12);
  EXPECT_EQ(unit.best_lr, 0x1p-2);
  EXPECT_NEAR(unit.best.mean, 2.15, 1e-12);
  EXPECT_FALSE(unit.best_at_edge);
  EXPECT_NEAR(unit.gap_pct, 100.0 * (2.15 - 2.05) / 2.05, 1e-9);

  const SweepCurve& pure = curve(c, "gpt", "fp16-pure");
  EXPECT_TRUE(std::isnan(pure.best_lr));
  EXPECT_TRUE(std::isnan(pure.gap_pct));

  const SweepCurve& mlp = curve(c, "mlp", "fp32");  // accuracy: higher is better
  EXPECT_EQ(mlp.best_lr, 3e-3);
  EXPECT_NEAR(mlp.best.mean, 85.0, 1e-9);
  EXPECT_TRUE(mlp.best_at_edge);

  // The tables keep only the best rate's runs (all runs of a recipe without one).
  const auto best = at_best_rate(sweep_runs(), c);
  ASSERT_EQ(best.size(), 2u + 2u + 2u + 1u);
  for (const auto& r : best) {
    if (r.recipe == "unit-fp32") {
      EXPECT_EQ(r.lr, 0x1p-2);
    }
  }
  const auto rows = summarize(best);
  for (const auto& s : rows) {
    if (s.task == "gpt" && s.recipe == "unit-fp32") {
      EXPECT_NEAR(s.gap_pct, unit.gap_pct, 1e-9);
    }
  }

  EXPECT_FALSE(is_sweep(lr_sweep({run("fp32", 1e-3, 1, 2.0), run("fp32", 1e-3, 2, 2.1)})));
}

TEST(LrSweepReport, TableShowsBestRateGapAndEveryRate) {
  const std::string t = sweep_table_md(lr_sweep(sweep_runs()), "gpt");
  EXPECT_NE(t.find("| recipe | best lr | val bpc at best lr (mean ± std) | gap to fp32 at fp32's best lr | 2^-11 | 2^-10 | 2^-9 | "
                   "2^-3 | 2^-2 | 2^-1 |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| fp32 | 2^-10 | 2.050 ± 0.071 | +0.00 % | 2.500 | 2.050 | 2.250 | not run | not run | not run |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| unit-fp32 | 2^-2 | 2.150 ± 0.071 | +4.88 % | not run | not run | not run | 2.600 | 2.150 | 1.900 (1 "
                   "diverged) |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| fp16-pure | none (every rate diverged or failed) | — | — | not run | diverged | diverged |"),
            std::string::npos)
      << t;
  const std::string m = sweep_table_md(lr_sweep(sweep_runs()), "mlp");
  EXPECT_NE(m.find("| fp32 | 0.003 (edge of the sweep) | 85.00 | +0.00 | 80.00 | 85.00 |"), std::string::npos) << m;
}

TEST(LrSweepReport, ReportHasTheSweepFigureAtTheRunsPoints) {
  const fs::path dir = fs::temp_directory_path() / ("mantissa_sweep_report_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ReportInput in;
  in.runs = sweep_runs();
  const ReportFiles f = write_report(dir.string(), in);
  const std::string md = mantissa::io::read_file(f.markdown);
  EXPECT_NE(md.find("## Learning-rate sweep"), std::string::npos);
  EXPECT_NE(md.find("![Final val bpc against log2 learning rate"), std::string::npos) << md;
  // The recipe table shows unit-fp32 at 2^-2, against fp32 at 2^-10.
  EXPECT_NE(md.find("| unit-fp32 | 2.150 ± 0.071 | +4.88 % |"), std::string::npos) << md;
  const std::string svg = mantissa::io::read_file((dir / "figures" / "gpt_lr_sweep.svg").string());

  // Rebuild the plot's axes from the same data to get the expected pixels.
  LinePlot p;
  p.title = "Learning-rate sweep: validation bits per character (mean over seeds)";
  p.x.label = "log2 learning rate";
  p.y.label = "validation bits per character";
  p.series = {{"fp32", {-11, -10, -9}, {2.5, 2.05, 2.25}, "", false, true},
              {"unit-fp32", {-3, -2, -1}, {2.6, 2.15, NAN}, "", true, true}};
  const Layout l = layout(p);
  auto px = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", v);
    return std::string(b);
  };
  for (const auto& s : p.series) {
    const std::regex g("data-name=\"" + s.name + "\"[^>]*>\\s*<path d=\"([^\"]*)\"");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(svg, m, g)) << s.name << "\n" << svg;
    std::string want;
    for (size_t i = 0; i < s.x.size(); ++i)
      if (std::isfinite(s.y[i])) want += (want.empty() ? "M" : " L") + px(l.x(s.x[i])) + " " + px(l.y(s.y[i]));
    EXPECT_EQ(m[1].str(), want) << s.name;
  }
  EXPECT_EQ(svg.find("data-name=\"fp16-pure\""), std::string::npos);  // nothing finite to draw
  fs::remove_all(dir);
}

// A width study: curves per (recipe, d_model), gaps to fp32 at the same width,
// a d_model column, one figure per recipe with a line per width, and recipe
// tables of the widest model.
TEST(LrSweepReport, WidthStudyComparesAtEachWidth) {
  auto at = [](const std::string& recipe, int64_t width, double lr, double bpc) {
    RunResult r = run(recipe, lr, 1, bpc);
    r.d_model = width;
    r.id = "gpt-d" + std::to_string(width) + "-" + recipe + "-lr" + lr_label(lr) + "-s1";
    return r;
  };
  // fp32's best rate moves with width (2^-8 at 64, 2^-10 at 128); umup's stays at 2^-1.
  const std::vector<RunResult> runs = {
      at("fp32", 64, 0x1p-10, 3.0),     at("fp32", 64, 0x1p-9, 2.8),      at("fp32", 64, 0x1p-8, 2.7),
      at("fp32", 128, 0x1p-10, 2.4),    at("fp32", 128, 0x1p-9, 2.5),     at("fp32", 128, 0x1p-8, 2.6),
      at("umup-fp32", 64, 0x1p-2, 2.9), at("umup-fp32", 64, 0x1p-1, 2.75), at("umup-fp32", 64, 0x1p0, 2.8),
      at("umup-fp32", 128, 0x1p-2, 2.6), at("umup-fp32", 128, 0x1p-1, 2.3), at("umup-fp32", 128, 0x1p0, 2.5)};
  const auto c = lr_sweep(runs);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(sweep_widths(c, "gpt"), (std::vector<int64_t>{64, 128}));
  for (const auto& s : c) {
    SCOPED_TRACE(s.recipe + " " + std::to_string(s.d_model));
    const bool fp32 = s.recipe == "fp32", narrow = s.d_model == 64;
    EXPECT_EQ(s.best_lr, fp32 ? (narrow ? 0x1p-8 : 0x1p-10) : 0x1p-1);
    EXPECT_NEAR(s.gap_pct, fp32 ? 0.0 : narrow ? 100.0 * (2.75 - 2.7) / 2.7 : 100.0 * (2.3 - 2.4) / 2.4, 1e-9);
  }
  const std::string t = sweep_table_md(c, "gpt");
  EXPECT_NE(t.find("| umup-fp32 | 128 | 2^-1 | 2.300 | -4.17 % |"), std::string::npos) << t;
  EXPECT_NE(t.find("| fp32 | 64 | 2^-8 (edge of the sweep) | 2.700 | +0.00 % |"), std::string::npos) << t;

  const fs::path dir = fs::temp_directory_path() / ("mantissa_transfer_report_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ReportInput in;
  in.runs = runs;
  write_report(dir.string(), in);
  const std::string md = mantissa::io::read_file((dir / "report.md").string());
  EXPECT_NE(md.find("| umup-fp32 | 2.300 | -4.17 % |"), std::string::npos) << md;  // widest model, best rate
  EXPECT_FALSE(fs::exists(dir / "figures" / "gpt_lr_sweep.svg"));
  for (const char* recipe : {"fp32", "umup-fp32"}) {
    const std::string svg = mantissa::io::read_file((dir / "figures" / ("gpt_transfer_" + std::string(recipe) + ".svg")).string());
    EXPECT_NE(svg.find("data-name=\"d_model 64\""), std::string::npos) << recipe;
    EXPECT_NE(svg.find("data-name=\"d_model 128\""), std::string::npos) << recipe;
    // three points per width: "M x y L x y L x y"
    const std::regex line("data-name=\"d_model 128\"[^>]*>\\s*<path d=\"M[0-9.]+ [0-9.]+ L[0-9.]+ [0-9.]+ L[0-9.]+ [0-9.]+\"");
    EXPECT_TRUE(std::regex_search(svg, line)) << svg;
  }
  fs::remove_all(dir);
}
