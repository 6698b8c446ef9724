// Typed recipe settings (recipe/setting.hpp): a format field holds the format its
// name names, parsed when set, against the formats' definitions (E4M3FN's max
// 448, bf16's 7 mantissa bits, an "M/V" optimizer state's two dtypes); a name
// that names nothing is kept with the parser's message until the recipe is
// validated, which names the field.
#include <gtest/gtest.h>

#include <string>

#include "mantissa/recipe/recipe.hpp"

namespace mantissa::recipe {
namespace {

std::string message_of(const Recipe& r) {
  try {
    validate_recipe(r);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(RecipeSetting, FormatFieldsHoldTheParsedFormat) {
  const Recipe r = find_recipe("fp8-delayed");
  EXPECT_EQ(r.cast_forward.value().max(), 448.0);
  EXPECT_EQ(r.cast_backward.value().max(), 57344.0);
  EXPECT_EQ(r.matmul_format.value().mantissa_bits, 7);
  EXPECT_EQ(r.matmul_format.value().exponent_bits, 8);
  EXPECT_EQ(r.saved_format.value().max(), 448.0);
  Recipe s = find_recipe("fp32");
  set_recipe_field(s, "optimizer_state_format", "e4m3fn/fp16");
  EXPECT_EQ(s.optimizer_state_format.value().m, DType::e4m3fn);
  EXPECT_EQ(s.optimizer_state_format.value().v, DType::f16);
  EXPECT_EQ(s.optimizer_state_format, "e4m3fn/fp16");
}

TEST(RecipeSetting, ABadNameIsRefusedWhenTheRecipeIsValidated) {
  Recipe r = find_recipe("bf16-amp");
  r.weight_format = "fp99";  // assigning does not throw
  EXPECT_EQ(r.weight_format, "fp99");
  EXPECT_FALSE(r.weight_format.error().empty());
  EXPECT_THROW((void)r.weight_format.value(), std::invalid_argument);
  const std::string m = message_of(r);
  EXPECT_NE(m.find("weight_format"), std::string::npos) << m;
  EXPECT_NE(m.find("fp99"), std::string::npos) << m;
  r.weight_format = "bf16";
  EXPECT_TRUE(r.weight_format.error().empty());
  EXPECT_EQ(message_of(r), "(no exception)");
  // Words that name no format where a field allows them: no master copy, no cast.
  r.master_format = "none";
  r.cast_forward = "";
  EXPECT_EQ(message_of(r), "(no exception)");
  r.matmul_format = "none";
  EXPECT_NE(message_of(r).find("matmul_format"), std::string::npos);
}

// Numbers are read by the one parser every setting uses: decimal and hex
// floats, subnormals; no trailing text, nothing infinite or NaN.
TEST(RecipeSetting, NumbersAcceptEverySpellingOfAFiniteDouble) {
  Recipe r = find_recipe("fp16-amp");
  set_recipe_field(r, "loss_scale.init_scale", "0x1p-3");
  EXPECT_EQ(r.loss_scale.init_scale, 0.125);
  set_recipe_field(r, "loss_scale.init_scale", " 65536");
  EXPECT_EQ(r.loss_scale.init_scale, 65536.0);
  set_recipe_field(r, "loss_scale.init_scale", "4.9406564584124654e-324");
  EXPECT_EQ(r.loss_scale.init_scale, 0x1p-1074);
  for (const char* bad : {"", "1e400", "inf", "nan", "2x", "0x1p-3 ", "--1"}) {
    try {
      set_recipe_field(r, "loss_scale.init_scale", bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "recipe setting loss_scale.init_scale: '" + std::string(bad) + "' is not a number");
    }
  }
}

TEST(RecipeSetting, NoneRemovesACastAsTheEmptyValueDoes) {
  Recipe r = find_recipe("unit-fp8");
  set_recipe_field(r, "cast_backward", "none");
  EXPECT_TRUE(r.cast_backward.empty());
  EXPECT_EQ(r.cast_forward.value().max(), 448.0);
  set_recipe_field(r, "cast_forward", "");
  EXPECT_TRUE(r.cast_forward.empty());
  EXPECT_NO_THROW(validate_recipe(r));  // unit scaling casts nothing now, which is allowed
  EXPECT_TRUE(recipe_from_json(recipe_to_json(r)).cast_backward.empty());
}

}  // namespace
}  // namespace mantissa::recipe
