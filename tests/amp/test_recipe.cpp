// The recipe registry: the built-ins carry the settings of BRIEF section 2
// (apex opt levels, autocast, GradScaler), overrides and JSON round trips.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "mantissa/amp/amp.hpp"
#include "mantissa/amp/recipe.hpp"

using namespace mantissa;
using namespace mantissa::amp;

TEST(Recipe, BuiltinsHaveTheDocumentedSettings) {
  for (const char* name : {"fp32", "bf16-amp", "fp16-amp", "fp16-amp-noscale", "fp16-pure", "bf16-pure"})
    EXPECT_NO_THROW(find_recipe(name)) << name;
  const Recipe fp32 = find_recipe("fp32");
  EXPECT_EQ(fp32.matmul_format, "fp32");
  EXPECT_EQ(fp32.weight_format, "fp32");
  EXPECT_EQ(fp32.loss_scale.method, ScalingMethod::none);

  const Recipe bf = find_recipe("bf16-amp");
  EXPECT_EQ(bf.matmul_format, "bf16");
  EXPECT_EQ(bf.saved_format, "bf16");
  EXPECT_EQ(bf.weight_format, "fp32");
  EXPECT_EQ(bf.loss_scale.method, ScalingMethod::none);

  const Recipe f16 = find_recipe("fp16-amp");
  EXPECT_EQ(f16.matmul_format, "fp16");
  EXPECT_EQ(f16.loss_scale.method, ScalingMethod::dynamic);
  EXPECT_EQ(f16.loss_scale.init_scale, 65536.0);
  EXPECT_EQ(f16.loss_scale.growth_factor, 2.0);
  EXPECT_EQ(f16.loss_scale.backoff_factor, 0.5);
  EXPECT_EQ(f16.loss_scale.growth_interval, 2000);

  EXPECT_EQ(find_recipe("fp16-amp-noscale").loss_scale.method, ScalingMethod::none);

  const Recipe pure = find_recipe("fp16-pure");
  EXPECT_EQ(pure.weight_format, "fp16");
  EXPECT_EQ(pure.gradient_format, "fp16");
  EXPECT_EQ(pure.master_format, "none");
  EXPECT_EQ(pure.loss_scale.method, ScalingMethod::none);
  EXPECT_EQ(find_recipe("bf16-pure").weight_format, "bf16");
  EXPECT_EQ(find_recipe("bf16-pure").master_format, "none");
}

TEST(Recipe, OptLevelsFollowApex) {
  // BRIEF section 2 table: weights, casting, norms fp32, master, loss scale.
  const Recipe o0 = recipe_for_opt_level("O0");
  EXPECT_EQ(o0.matmul_format, "fp32");
  EXPECT_EQ(o0.loss_scale.method, ScalingMethod::none);
  const Recipe o1 = recipe_for_opt_level("O1");
  EXPECT_EQ(o1.weight_format, "fp32");
  EXPECT_EQ(o1.matmul_format, "fp16");
  EXPECT_EQ(o1.loss_scale.method, ScalingMethod::dynamic);
  const Recipe o2 = recipe_for_opt_level("O2");
  EXPECT_EQ(o2.weight_format, "fp16");
  EXPECT_EQ(o2.master_format, "fp32");
  EXPECT_TRUE(o2.norms_fp32);
  EXPECT_EQ(o2.loss_scale.method, ScalingMethod::dynamic);
  const Recipe o3 = recipe_for_opt_level("O3");
  EXPECT_EQ(o3.weight_format, "fp16");
  EXPECT_EQ(o3.master_format, "none");
  EXPECT_FALSE(o3.norms_fp32);
  EXPECT_EQ(o3.loss_scale.method, ScalingMethod::none);
  EXPECT_THROW(recipe_for_opt_level("O4"), std::invalid_argument);
}

TEST(Recipe, UnknownNamesAndSettingsAreNamed) {
  try {
    find_recipe("fp17");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp17"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bf16-amp"), std::string::npos);
  }
  Recipe r = find_recipe("fp32");
  EXPECT_THROW(set_recipe_field(r, "colour", "red"), std::invalid_argument);
  EXPECT_THROW(set_recipe_field(r, "matmul_format", "fp7"), std::invalid_argument);
  EXPECT_THROW(set_recipe_field(r, "loss_scale.init_scale", "big"), std::invalid_argument);
  EXPECT_THROW(set_recipe_field(r, "weight_rounding", "sideways"), std::invalid_argument);
  set_recipe_field(r, "weight_rounding", "stochastic");
  set_recipe_field(r, "loss_scale.method", "static");
  set_recipe_field(r, "loss_scale.init_scale", "1024");
  EXPECT_EQ(r.weight_rounding, WeightRounding::stochastic);
  EXPECT_EQ(r.loss_scale.method, ScalingMethod::static_scale);
  EXPECT_EQ(r.loss_scale.init_scale, 1024.0);
}

TEST(Recipe, JsonRoundTripsEverySetting) {
  for (const Recipe& r : recipes()) {
    const std::string j = recipe_to_json(r);
    const Recipe back = recipe_from_json(j);
    EXPECT_EQ(recipe_to_json(back), j) << r.name;
    const auto parsed = nlohmann::json::parse(j);
    for (const char* key : {"name", "parametrisation", "matmul_format", "saved_format", "gradient_format",
                            "weight_format", "master_format", "optimizer_state_format", "weight_rounding",
                            "loss_scale"})
      EXPECT_TRUE(parsed.contains(key)) << r.name << " lacks " << key;
  }
}

TEST(Recipe, RegistryIsOpenForLaterRecipes) {
  Recipe r = find_recipe("bf16-amp");
  r.name = "test-bf16-static";
  r.loss_scale.method = ScalingMethod::static_scale;
  r.loss_scale.init_scale = 128;
  register_recipe(r);
  EXPECT_EQ(find_recipe("test-bf16-static").loss_scale.init_scale, 128.0);
  EXPECT_NE(recipe_names().find("test-bf16-static"), std::string::npos);
  Recipe bad = r;
  bad.name = "test-bad";
  bad.weight_format = "fp99";
  EXPECT_THROW(register_recipe(bad), std::invalid_argument);
}

TEST(Recipe, PrecisionPolicyMapsFormats) {
  auto p = precision_policy(find_recipe("bf16-amp"));
  EXPECT_EQ(p.matmul, DType::bf16);
  EXPECT_EQ(p.saved, DType::bf16);
  p = precision_policy(find_recipe("fp32"));
  EXPECT_EQ(p.matmul, DType::f32);
  Recipe odd = find_recipe("fp32");
  odd.matmul_format = "e3m4";
  EXPECT_THROW(precision_policy(odd), std::invalid_argument);
}
