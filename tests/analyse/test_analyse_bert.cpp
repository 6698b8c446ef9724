// `mantissa analyse --model bert`: at initialisation every tracked tensor of
// the unit-scaled BERT (post-norm and pre-norm, the paper's rules) has RMS
// within [1/2, 2], forward and backward, on padded masked-LM batches; the
// standard BERT's table spans a far wider range.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "mantissa/analyse/analyse.hpp"

using namespace mantissa;
namespace fs = std::filesystem;

namespace {

struct Corpus {
  fs::path path = fs::temp_directory_path() / ("mantissa_analyse_bert_" + std::to_string(::getpid()) + ".txt");
  Corpus() {
    std::ofstream f(path);
    std::mt19937_64 g(9);
    const char* words[] = {"It ", "is ", "a ", "truth ", "universally ", "acknowledged, ", "that ", "a ", "single ", "man. "};
    for (int i = 0; i < 4000; ++i) f << words[g() % 10];
  }
  ~Corpus() { fs::remove(path); }
};

analyse::AnalyseOptions options(const Corpus& d, const std::string& recipe, const std::string& norm) {
  analyse::AnalyseOptions o;
  train::TrainConfig& c = o.config;
  c.model = "bert";
  c.norm = norm;
  c.layers = 2;
  c.d_model = 64;
  c.heads = 4;
  c.seq_len = 64;
  c.batch_size = 8;
  c.recipe = recipe;
  c.data = d.path.string();
  return o;
}

}  // namespace

TEST(AnalyseBert, UnitBertIsUnitScaledAtInit) {
  Corpus d;
  for (const char* norm : {"post", "pre"}) {
    SCOPED_TRACE(norm);
    analyse::AnalyseOptions o = options(d, "unit-fp32", norm);
    o.config.set = {"unit.rule_set=paper"};
    const analyse::Analysis a = analyse::analyse(o);
    EXPECT_EQ(a.parametrisation, "unit");
    for (const auto& row : a.ops.rows()) {
      std::printf("%-6s %-18s %-8s rms %.3f\n", norm, row.op.c_str(), unit::pass_name(row.pass), row.stats.rms);
      EXPECT_GE(row.stats.rms, 0.5) << row.op << " " << unit::pass_name(row.pass);
      EXPECT_LE(row.stats.rms, 2.0) << row.op << " " << unit::pass_name(row.pass);
    }
  }
}

TEST(AnalyseBert, StandardBertSpreadsWider) {
  Corpus d;
  const analyse::Analysis a = analyse::analyse(options(d, "fp32", "post"));
  double lo = 1e300, hi = 0;
  for (const auto& row : a.ops.rows()) lo = std::min(lo, row.stats.rms), hi = std::max(hi, row.stats.rms);
  std::printf("standard BERT: op RMS from %.3g to %.3g\n", lo, hi);
  EXPECT_GT(hi / lo, 1000.0);
}
