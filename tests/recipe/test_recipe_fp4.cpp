// The FP4 recipes and settings (recipe/recipe_fp4.hpp): registered, every
// ingredient settable by key, JSON round trip, clear errors.
#include <gtest/gtest.h>

#include <stdexcept>

#include "mantissa/recipe/recipe.hpp"

using namespace mantissa::recipe;

TEST(RecipeFp4, BuiltinsAndTheirIngredients) {
  const Recipe nv = find_recipe("nvfp4");
  EXPECT_EQ(nv.fp4.format, "nvfp4");
  EXPECT_TRUE(nv.fp4.forward && nv.fp4.backward && nv.fp4.weight_2d);
  EXPECT_EQ(nv.fp4.rht, "random");
  EXPECT_EQ(nv.fp4.sr, "gradients");
  EXPECT_EQ(nv.fp4.bf16_layers, "0,-1,head");
  const Recipe naive = find_recipe("nvfp4-naive");
  EXPECT_FALSE(naive.fp4.weight_2d);
  EXPECT_EQ(naive.fp4.rht, "none");
  EXPECT_EQ(naive.fp4.sr, "none");
  EXPECT_EQ(naive.fp4.bf16_layers, "none");
  const Recipe mx = find_recipe("mxfp4");
  EXPECT_EQ(mx.fp4.format, "mxfp4");
  EXPECT_FALSE(mx.fp4.forward);
  EXPECT_EQ(mx.fp4.sr, "backward");
  EXPECT_TRUE(find_recipe("mxfp4-fwd").fp4.forward);
  // Tseng et al. rotate both backward products' inputs, NVIDIA the Wgrad ones only.
  EXPECT_TRUE(mx.fp4.rht_dgrad);
  EXPECT_TRUE(find_recipe("mxfp4-fwd").fp4.rht_dgrad);
  EXPECT_FALSE(nv.fp4.rht_dgrad);
  EXPECT_FALSE(find_recipe("mxfp4-naive").fp4.rht_dgrad);
  for (const char* name : {"nvfp4", "nvfp4-naive", "mxfp4", "mxfp4-fwd", "mxfp4-naive"})
    EXPECT_TRUE(find_recipe(name).fp4.pack_saved) << name;
  EXPECT_EQ(find_recipe("mxfp4-naive").fp4.sr, "none");
}

TEST(RecipeFp4, SetAndRoundTrip) {
  Recipe r = find_recipe("nvfp4");
  set_recipe_field(r, "rht", "deterministic");
  set_recipe_field(r, "fp4_sr", "none");
  set_recipe_field(r, "fp4_weight_2d", "false");
  set_recipe_field(r, "bf16_layers", "1,-2,head");
  set_recipe_field(r, "fp4_until", "0.9");
  set_recipe_field(r, "rht_seed", "1234");
  set_recipe_field(r, "rht_dgrad", "true");
  set_recipe_field(r, "fp4_pack_saved", "false");
  const Recipe back = recipe_from_json(recipe_to_json(r));
  EXPECT_EQ(back.fp4.rht, "deterministic");
  EXPECT_EQ(back.fp4.sr, "none");
  EXPECT_FALSE(back.fp4.weight_2d);
  EXPECT_EQ(back.fp4.bf16_layers, "1,-2,head");
  EXPECT_DOUBLE_EQ(back.fp4.until, 0.9);
  EXPECT_EQ(back.fp4.seed, 1234);
  EXPECT_TRUE(back.fp4.rht_dgrad);
  EXPECT_FALSE(back.fp4.pack_saved);
  EXPECT_EQ(recipe_to_json(back), recipe_to_json(r));
}

TEST(RecipeFp4, BadValuesNameTheKey) {
  Recipe r = find_recipe("nvfp4");
  auto message = [&](const char* k, const char* v) {
    try {
      set_recipe_field(r, k, v);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("fp4_until", "1.5").find("fp4_until"), std::string::npos);
  EXPECT_NE(message("fp4_until", "0").find("fp4_until"), std::string::npos);
  EXPECT_NE(message("rht", "sometimes").find("rht"), std::string::npos);
  EXPECT_NE(message("bf16_layers", "0,x").find("bf16_layers"), std::string::npos);
  EXPECT_NE(message("fp4_format", "fp3").find("fp4_format"), std::string::npos);
  EXPECT_NE(message("rht_seed", "-1").find("rht_seed"), std::string::npos);
  EXPECT_NE(message("fp4_sr", "all").find("fp4_sr"), std::string::npos);
  EXPECT_NE(message("rht_dgrad", "yes").find("rht_dgrad"), std::string::npos);
  EXPECT_NE(message("fp4_pack_saved", "1").find("fp4_pack_saved"), std::string::npos);
  Recipe both = find_recipe("nvfp4");
  both.cast_forward = "e4m3fn";
  EXPECT_THROW(validate_recipe(both), std::invalid_argument);
}
