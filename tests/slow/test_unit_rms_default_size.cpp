// `mantissa analyse --model llama|bert --recipe unit-fp32` at the default size (4 layers,
// d_model 256, batch 16 x 128, the default corpus) under both rule sets: every tracked op
// output and the gradient arriving at it has RMS in [1/2, 2] at initialisation. The only rows
// left out are those analyse::unit_exclusions names with its reason (the library's u-muP readout
// logits, 1/fan_in by design); parameter rows are weights and weight gradients, not op
// outputs, and are not checked.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "mantissa/analyse/analyse.hpp"

using namespace mantissa;

namespace {

void check_default_size(const std::string& model, const std::string& rule_set) {
  SCOPED_TRACE(model + ", " + rule_set + " rules");
  analyse::AnalyseOptions o;
  o.config.model = model;  // every size flag at its default
  // The default corpus: $MANTISSA_DATA, else the source tree's .cache/data (scripts/data.sh).
  const char* env = std::getenv("MANTISSA_DATA");
  if (env == nullptr || *env == 0) o.config.data = std::string(MANTISSA_SOURCE_DIR) + "/.cache/data/austen.txt";
  o.config.recipe = "unit-fp32";
  o.config.set = {"unit.rule_set=" + rule_set};
  const analyse::Analysis a = analyse::analyse(o);
  ASSERT_EQ(a.parametrisation, "unit");
  ASSERT_EQ(a.rule_set, rule_set);
  const std::vector<analyse::UnitExclusion> ex = analyse::unit_exclusions(a);
  if (rule_set == "paper") {
    EXPECT_TRUE(ex.empty());
  } else {
    ASSERT_EQ(ex.size(), 1u);
    EXPECT_EQ(ex[0].op, "logits");
    EXPECT_FALSE(ex[0].reason.empty());
  }
  int checked = 0, excluded = 0;
  for (const auto& row : a.ops.rows()) {
    bool skip = false;
    for (const auto& e : ex) skip |= e.op == row.op && e.pass == row.pass;
    std::printf("%-6s %-8s %-18s %-8s rms %.3f%s\n", model.c_str(), rule_set.c_str(), row.op.c_str(),
                unit::pass_name(row.pass), row.stats.rms, skip ? "  (excluded)" : "");
    if (skip) {
      ++excluded;
      continue;
    }
    ++checked;
    EXPECT_GE(row.stats.rms, 0.5) << row.op << " " << unit::pass_name(row.pass);
    EXPECT_LE(row.stats.rms, 2.0) << row.op << " " << unit::pass_name(row.pass);
  }
  EXPECT_EQ(excluded, static_cast<int>(ex.size()));
  EXPECT_GT(checked, 60);  // 4 blocks of 7 (BERT) or 11 (Llama) ops, both passes
}

}  // namespace

TEST(UnitRmsDefaultSize, LlamaLibraryRules) { check_default_size("llama", "library"); }
TEST(UnitRmsDefaultSize, LlamaPaperRules) { check_default_size("llama", "paper"); }
TEST(UnitRmsDefaultSize, BertLibraryRules) { check_default_size("bert", "library"); }
TEST(UnitRmsDefaultSize, BertPaperRules) { check_default_size("bert", "paper"); }
