// The recipe field table (src/recipe/fields.cpp) covers every setting: each
// one listed by recipe_fields() is written to recipe JSON, round-trips
// through JSON and `--set` with a value other than its default, and a bad
// value is refused with a message naming the setting (and, for settings that
// take one of a few names, every valid name).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "mantissa/recipe/recipe.hpp"

namespace mantissa::recipe {
namespace {

// A value other than the default for every setting, and one it refuses.
struct Sample {
  const char* other;
  const char* bad;
};
const std::map<std::string, Sample> kSamples = {
    {"parametrisation", {"umup", "sideways"}},
    {"matmul_format", {"bf16", "fp7"}},
    {"saved_format", {"e4m3fn", "fp7"}},
    {"gradient_format", {"fp16", "fp7"}},
    {"weight_format", {"bf16", "none"}},
    {"master_format", {"none", "fp7"}},
    {"optimizer_state_format", {"e4m3fn/fp16", "fp7"}},
    {"norms_fp32", {"true", "yes"}},
    {"weight_rounding", {"stochastic", "sideways"}},
    {"cast_forward", {"e4m3fnuz", "fp7"}},
    {"cast_backward", {"e5m2fnuz", "fp7"}},
    {"cast_scaling", {"current", "sideways"}},
    {"amax_history", {"16", "0"}},
    {"cast_margin", {"2.0", "0.5"}},
    {"mx_scale_rounding", {"ceil", "up"}},
    {"cast_readout", {"false", "1"}},
    {"loss_scale.method", {"dynamic", "sideways"}},
    {"loss_scale.init_scale", {"1024.0", "big"}},
    {"loss_scale.growth_factor", {"4.0", "big"}},
    {"loss_scale.backoff_factor", {"0.25", "big"}},
    {"loss_scale.growth_interval", {"100", "1.5"}},
    {"loss_scale.min_scale", {"1.0", "small"}},
    {"loss_scale.max_scale", {"16777216.0", "big"}},
    {"fp4_format", {"mxfp4", "fp3"}},
    {"fp4_forward", {"false", "yes"}},
    {"fp4_backward", {"false", "yes"}},
    {"fp4_weight_2d", {"false", "yes"}},
    {"rht", {"deterministic", "sometimes"}},
    {"rht_dgrad", {"true", "yes"}},
    {"fp4_sr", {"backward", "all"}},
    {"bf16_layers", {"1,-2,head", "0,x"}},
    {"fp4_until", {"0.5", "1.5"}},
    {"rht_seed", {"1234", "-1"}},
    {"fp4_pack_saved", {"false", "yes"}},
};

// The value of `key` in recipe JSON, as --set reads it back.
std::string json_value(const Recipe& r, const std::string& key) {
  const auto j = nlohmann::json::parse(recipe_to_json(r));
  const size_t dot = key.find('.');
  const auto& v = dot == std::string::npos ? j.at(key) : j.at(key.substr(0, dot)).at(key.substr(dot + 1));
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string message(Recipe& r, const std::string& key, const std::string& value) {
  try {
    set_recipe_field(r, key, value);
    validate_recipe(r);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(RecipeFields, EveryFieldIsSampled) {
  const std::vector<FieldInfo> fields = recipe_fields();
  EXPECT_EQ(fields.size(), kSamples.size());
  for (const FieldInfo& f : fields) {
    EXPECT_TRUE(kSamples.contains(f.key)) << "no sample for " << f.key;
    EXPECT_FALSE(f.type.empty()) << f.key;
    EXPECT_FALSE(f.description.empty()) << f.key;
    EXPECT_EQ(f.default_value, json_value(Recipe{}, f.key)) << f.key;
  }
}

// Each setting alone, on a recipe where the other value is valid.
Recipe base_for(const std::string& key) {
  if (key.starts_with("fp4_") || key.starts_with("rht") || key == "bf16_layers") return find_recipe("nvfp4");
  if (key.starts_with("cast_") || key == "amax_history" || key == "mx_scale_rounding")
    return find_recipe("fp8-delayed");
  Recipe r = find_recipe("fp32");
  if (key == "master_format" || key == "norms_fp32" || key == "weight_rounding") r.weight_format = "bf16";
  return r;
}

TEST(RecipeFields, EveryFieldRoundTripsThroughSetAndJson) {
  for (const FieldInfo& f : recipe_fields()) {
    const Sample& s = kSamples.at(f.key);
    Recipe r = base_for(f.key);
    ASSERT_NE(json_value(r, f.key), s.other) << f.key << ": the sample is the recipe's own value";
    ASSERT_NO_THROW(set_recipe_field(r, f.key, s.other)) << f.key;
    ASSERT_NO_THROW(validate_recipe(r)) << f.key;
    EXPECT_EQ(json_value(r, f.key), s.other) << f.key;
    const Recipe back = recipe_from_json(recipe_to_json(r));
    EXPECT_EQ(json_value(back, f.key), s.other) << f.key;
    EXPECT_EQ(recipe_to_json(back), recipe_to_json(r)) << f.key;
    // --set with the value as JSON writes it gives the same recipe.
    Recipe again = base_for(f.key);
    set_recipe_field(again, f.key, json_value(back, f.key));
    EXPECT_EQ(recipe_to_json(again), recipe_to_json(r)) << f.key;
  }
}

TEST(RecipeFields, ABadValueNamesTheFieldAndWhatItTakes) {
  for (const FieldInfo& f : recipe_fields()) {
    Recipe r = base_for(f.key);
    const std::string m = message(r, f.key, kSamples.at(f.key).bad);
    EXPECT_NE(m, "(no exception)") << f.key;
    EXPECT_NE(m.find(f.key), std::string::npos) << f.key << ": " << m;
    // A setting that takes one of a few names lists them all.
    if (f.type.starts_with("one of ")) {
      EXPECT_NE(m.find("(valid: " + f.type.substr(7) + ")"), std::string::npos) << m;
    }
  }
  Recipe r = find_recipe("fp32");
  const std::string m = message(r, "colour", "red");
  for (const FieldInfo& f : recipe_fields()) EXPECT_NE(m.find(f.key), std::string::npos) << f.key << " not in " << m;
}

}  // namespace
}  // namespace mantissa::recipe
