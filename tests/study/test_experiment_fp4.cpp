// The fp4 study preset: its runs, the "recipe/key=value" variants and no MLP task.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "mantissa/study/experiment.hpp"

using mantissa::study::ExperimentOptions;

TEST(ExperimentPlanFp4, VariantsRunTheBaseRecipeWithTheSetting) {
  ExperimentOptions o;
  o.preset = "fp4";
  const auto plan = mantissa::study::make_plan(o);
  ASSERT_EQ(plan.tasks.size(), 1u);  // GPT only
  EXPECT_EQ(plan.tasks[0].base.layers, 4);
  EXPECT_EQ(plan.tasks[0].base.d_model, 256);
  ASSERT_EQ(plan.runs.size(), 14u);
  const auto it = std::find_if(plan.runs.begin(), plan.runs.end(),
                               [](const auto& r) { return r.recipe == "nvfp4/rht=none"; });
  ASSERT_NE(it, plan.runs.end());
  EXPECT_EQ(it->config.recipe, "nvfp4");
  ASSERT_EQ(it->config.set.size(), 1u);
  EXPECT_EQ(it->config.set[0], "rht=none");
  EXPECT_EQ(it->id, "gpt-nvfp4-rht=none-s1337");
  EXPECT_TRUE(it->available);
  for (const char* r : {"bf16-amp", "fp8-delayed", "mxfp8", "nvfp4", "mxfp4", "nvfp4-naive", "mxfp4-naive"})
    EXPECT_TRUE(std::any_of(plan.runs.begin(), plan.runs.end(), [&](const auto& s) { return s.recipe == r; })) << r;
  const auto names = mantissa::study::preset_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "fp4"), names.end());
}
