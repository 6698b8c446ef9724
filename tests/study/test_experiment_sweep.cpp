// `mantissa experiment --lr-sweep`: the spec's rates exactly (powers of two
// from exp2 of integers, decimals times whole octaves are exact in binary),
// every bad spec refused naming the flag (exit 2 from the CLI), the plan's
// runs, and a tiny end-to-end sweep whose report table and figure hold the
// runs' own numbers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <regex>
#include <sstream>

#include "mantissa/io/files.hpp"
#include "mantissa/study/experiment.hpp"
#include "mantissa/train/session.hpp"
#include "train/cli_util.hpp"

namespace fs = std::filesystem;
using mantissa::study::parse_lr_sweep;

namespace {

void expect_refused(const std::string& spec, const std::string& why) {
  try {
    parse_lr_sweep(spec);
    ADD_FAILURE() << "'" << spec << "' was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--lr-sweep"), std::string::npos) << m;
    EXPECT_NE(m.find(why), std::string::npos) << "expected '" << why << "' in: " << m;
  }
}

}  // namespace

TEST(LrSweepSpec, RangesAndListsGiveExactRates) {
  const auto pow2 = parse_lr_sweep("2^-12:2^1:1");
  ASSERT_EQ(pow2.size(), 14u);
  for (int k = 0; k < 14; ++k) EXPECT_EQ(pow2[static_cast<size_t>(k)], std::ldexp(1.0, -12 + k)) << k;

  const auto half = parse_lr_sweep("2^-3:2^-1:0.5");  // 2^-3, 2^-2.5, ..., 2^-1
  ASSERT_EQ(half.size(), 5u);
  EXPECT_EQ(half[0], 0.125);
  EXPECT_EQ(half[2], 0.25);
  EXPECT_EQ(half[4], 0.5);
  EXPECT_NEAR(half[1], 0.125 * std::sqrt(2.0), 1e-17);
  EXPECT_NEAR(half[3], 0.25 * std::sqrt(2.0), 1e-17);

  EXPECT_EQ(parse_lr_sweep("1e-3:4e-3:1"), (std::vector<double>{1e-3, 2e-3, 4e-3}));
  EXPECT_EQ(parse_lr_sweep("1e-3:5e-3:1"), (std::vector<double>{1e-3, 2e-3, 4e-3}));  // STOP need not be hit
  EXPECT_EQ(parse_lr_sweep(" 0.001 : 0.001 : 2 "), (std::vector<double>{1e-3}));
  EXPECT_EQ(parse_lr_sweep("3e-3,1e-3, 2^-4"), (std::vector<double>{1e-3, 3e-3, 0.0625}));
  EXPECT_EQ(parse_lr_sweep("0.01"), (std::vector<double>{0.01}));
  EXPECT_EQ(parse_lr_sweep("2^-64:2^-1:1").size(), 64u);  // the limit
}

TEST(LrSweepSpec, BadSpecsAreRefusedNamingTheProblem) {
  expect_refused("", "empty");
  expect_refused("  ", "empty");
  expect_refused("2^x:2^1:1", "START '2^x' is not 2^EXPONENT");
  expect_refused("1e-3:abc:1", "STOP 'abc' is not a number");
  expect_refused("1e-3:1e-2", "three parts");
  expect_refused("1e-3:1e-2:1:", "three parts");
  expect_refused("1e-3:1e-2:0", "STEP '0' is not a positive number of octaves");
  expect_refused("1e-3:1e-2:-1", "STEP '-1'");
  expect_refused("1e-2:1e-3:1", "STOP is below START");
  expect_refused("0:1e-3:1", "not a positive finite rate");
  expect_refused("-1e-3", "not a positive finite rate");
  expect_refused("nan", "not a number");
  expect_refused("2^2000", "not a positive finite rate");
  expect_refused("1e-3,,2e-3", "not a number");
  expect_refused("1e-3,", "empty rate after the last comma");
  expect_refused("1e-3,1e-3", "listed twice");
  expect_refused("2^-65:2^-1:1", "more than 64 rates");
}

TEST(LrSweepPlan, EveryRecipeAtEveryRateWithItsOwnFolder) {
  mantissa::study::ExperimentOptions o;
  o.recipes = {"fp32", "unit-fp32"};
  o.mlp_recipes = {"fp32"};
  o.seeds = 2;
  o.lr_sweep = "2^-3:2^-1:1";
  const auto plan = mantissa::study::make_plan(o);
  std::vector<std::string> gpt_ids;
  for (const auto& r : plan.runs) {
    if (r.task == "gpt") {
      gpt_ids.push_back(r.id);
      EXPECT_TRUE(r.swept);
      EXPECT_EQ(r.config.min_lr, r.config.lr / 10);
    } else {
      EXPECT_FALSE(r.swept);  // the MLP keeps its default rate
      EXPECT_EQ(r.id, "mlp-fp32-s" + std::to_string(r.seed));
    }
  }
  const std::vector<std::string> want = {
      "gpt-fp32-lr2^-3-s1337",      "gpt-fp32-lr2^-3-s1338",      "gpt-fp32-lr2^-2-s1337",
      "gpt-fp32-lr2^-2-s1338",      "gpt-fp32-lr2^-1-s1337",      "gpt-fp32-lr2^-1-s1338",
      "gpt-unit-fp32-lr2^-3-s1337", "gpt-unit-fp32-lr2^-3-s1338", "gpt-unit-fp32-lr2^-2-s1337",
      "gpt-unit-fp32-lr2^-2-s1338", "gpt-unit-fp32-lr2^-1-s1337", "gpt-unit-fp32-lr2^-1-s1338"};
  EXPECT_EQ(gpt_ids, want);
  EXPECT_EQ(plan.runs[2].config.lr, 0.25);
  o.lr_standard = 1e-3;
  EXPECT_THROW(mantissa::study::make_plan(o), std::invalid_argument);
}

TEST(LrSweepCli, BadSpecExitsTwoNamingTheFlag) {
  for (const char* spec : {"2^-12:2^1", "1:0.1:1", "x"}) {
    const auto r = cli_test::run(std::string("experiment --lr-sweep '") + spec + "' --out /nonexistent/never-written");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("--lr-sweep"), std::string::npos) << r.out;
  }
  const auto both = cli_test::run("experiment --lr-sweep 2^-3:2^-1:1 --lr-unit 0.5");
  EXPECT_EQ(both.code, 2) << both.out;
  EXPECT_NE(both.out.find("--lr-unit"), std::string::npos) << both.out;
}

// The help states each text model's default unit rate as the registry sets it
// (the GPT the library's 2^-1; the Llama and the BERT their own 2^-2).
TEST(LrSweepCli, HelpNamesEachModelsDefaultUnitRate) {
  const auto r = cli_test::run("experiment --help");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(default: the model's own: gpt 2^-1, llama 2^-2, bert 2^-2)"), std::string::npos) << r.out;
  EXPECT_EQ(mantissa::train::unit_default_lr("llama"), 0x1p-2);
  EXPECT_EQ(mantissa::train::unit_default_lr("gpt"), mantissa::train::kUnitDefaultLr);
}

// Two recipes at two rates on a tiny GPT: the sweep table's best rate is the
// one whose run reached the lower val bpc, its value that run's, and the
// figure has one line per recipe through (log2 lr, val bpc) of the runs.
TEST(LrSweepCli, TinySweepReportsEachRecipeAtItsBestRate) {
  const fs::path dir = fs::temp_directory_path() / ("mantissa_lr_sweep_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "corpus.txt") << cli_test::word_corpus(8000, 5);
  const auto r = cli_test::run("experiment --recipes fp32,bf16-amp --mlp-recipes none --tokens 320 --layers 1 "
                               "--d-model 16 --heads 2 --seq-len 16 --batch-size 2 --threads 1 --no-inspect "
                               "--lr-sweep 2^-8,2^-4 --data " + (dir / "corpus.txt").string() + " --out " +
                               (dir / "out").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("4 runs trained"), std::string::npos) << r.out;
  const std::string md = mantissa::io::read_file((dir / "out" / "report.md").string());
  const std::string svg = mantissa::io::read_file((dir / "out" / "figures" / "gpt_lr_sweep.svg").string());
  std::map<std::string, std::map<int, double>> bpc;  // recipe -> log2 lr -> val bpc
  for (const char* recipe : {"fp32", "bf16-amp"})
    for (int e : {-8, -4}) {
      const auto j = nlohmann::json::parse(
          mantissa::io::read_file((dir / "out" / "runs" / ("gpt-" + std::string(recipe) + "-lr2^" + std::to_string(e) + "-s1337") / "result.json").string()));
      EXPECT_EQ(j["lr"].get<double>(), std::ldexp(1.0, e));
      bpc[recipe][e] = j["val_bpc"].get<double>();
    }
  ASSERT_NE(bpc["fp32"][-8], bpc["fp32"][-4]);
  const auto best = [&](const std::string& recipe) { return bpc[recipe][-8] < bpc[recipe][-4] ? -8 : -4; };
  const double fp32_best = bpc["fp32"][best("fp32")];
  for (const char* recipe : {"fp32", "bf16-amp"}) {
    const double v = bpc[recipe][best(recipe)];
    char row[160];
    std::snprintf(row, sizeof row, "| %s | 2^%d (edge of the sweep) | %.3f | %+.2f %% | %.3f | %.3f |", recipe, best(recipe), v,
                  100.0 * (v - fp32_best) / fp32_best, bpc[recipe][-8], bpc[recipe][-4]);
    EXPECT_NE(md.find(row), std::string::npos) << row << "\n" << md;
    // The recipe table shows the best rate's run.
    std::snprintf(row, sizeof row, "| %s | %.3f |", recipe, v);
    EXPECT_NE(md.find(row), std::string::npos) << row << "\n" << md;
  }
  // The figure: one line per recipe through its two rates, left to right.
  for (const char* recipe : {"fp32", "bf16-amp"}) {
    const std::regex g(std::string("data-name=\"") + recipe + "\"[^>]*>\\s*<path d=\"M([0-9.]+) ([0-9.]+) L([0-9.]+) ([0-9.]+)\"");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(svg, m, g)) << recipe << "\n" << svg;
    const double x0 = std::stod(m[1]), y0 = std::stod(m[2]), x1 = std::stod(m[3]), y1 = std::stod(m[4]);
    EXPECT_LT(x0, x1);  // 2^-8 left of 2^-4
    // SVG y grows downwards: the worse (higher) val bpc is drawn above.
    EXPECT_EQ(y0 < y1, bpc[recipe][-8] > bpc[recipe][-4]) << recipe;
  }
  fs::remove_all(dir);
}

// --preset transfer: every width, each recipe over its parametrisation's
// rates, heads of 32, ids naming width and rate; --widths picks a subset.
TEST(TransferPlan, WidthsTimesEachParametrisationsRates) {
  mantissa::study::ExperimentOptions o;
  o.preset = "transfer";
  const auto plan = mantissa::study::make_plan(o);
  EXPECT_TRUE(plan.width_study);
  std::map<std::string, std::vector<double>> rates;  // "<width> <recipe>" -> rates
  for (const auto& r : plan.runs) {
    ASSERT_EQ(r.task, "gpt");  // no MLP in this preset
    EXPECT_EQ(r.config.heads, r.config.d_model / 32);
    EXPECT_EQ(r.config.layers, 2);
    EXPECT_EQ(r.config.steps, 100);
    rates[std::to_string(r.config.d_model) + " " + r.recipe].push_back(r.config.lr);
  }
  EXPECT_EQ(plan.runs.size(), 4u * (8u + 6u));
  for (int w : {64, 128, 256, 512}) {
    EXPECT_EQ(rates[std::to_string(w) + " fp32"],
              (std::vector<double>{0x1p-13, 0x1p-12, 0x1p-11, 0x1p-10, 0x1p-9, 0x1p-8, 0x1p-7, 0x1p-6}));
    EXPECT_EQ(rates[std::to_string(w) + " umup-fp32"], (std::vector<double>{0x1p-3, 0x1p-2, 0x1p-1, 0x1p0, 0x1p1, 0x1p2}));
  }
  EXPECT_EQ(plan.runs.front().id, "gpt-d64-fp32-lr2^-13-s1337");
  EXPECT_EQ(plan.runs.back().id, "gpt-d512-umup-fp32-lr2^2-s1337");
  EXPECT_EQ(plan.runs.back().parametrisation, "umup");

  o.widths = {128};
  o.lr_sweep = "2^-2,2^0";  // one sweep for every recipe
  const auto sub = mantissa::study::make_plan(o);
  ASSERT_EQ(sub.runs.size(), 4u);
  EXPECT_EQ(sub.runs[3].id, "gpt-d128-umup-fp32-lr2^0-s1337");
  o.d_model = 64;
  EXPECT_THROW(mantissa::study::make_plan(o), std::invalid_argument);  // --widths with --d-model
  o.d_model = 0;
  o.lr_sweep.clear();
  o.lr_unit = 0.5;
  EXPECT_THROW(mantissa::study::make_plan(o), std::invalid_argument);  // the preset sweeps
  o.lr_unit = 0;
  o.widths = {96};  // 3 heads of 32
  EXPECT_EQ(mantissa::study::make_plan(o).runs.front().config.heads, 3);
  o.widths = {100};  // not a multiple of its 3 heads
  EXPECT_THROW(mantissa::study::make_plan(o), std::invalid_argument);
}
