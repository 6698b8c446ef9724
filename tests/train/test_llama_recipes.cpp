// Every registered recipe on the Llama-style decoder: a few training steps
// from the library's session (the same path as `mantissa train --model
// llama`), finite losses, and the recipe's operand casts really happen on
// this model (counted at the quantiser each recipe installs); under the
// scalify recipes only the residual gradients after each norm's backward and
// the head's are rescaled dynamically, every other operand at a propagated scale.
#include <gtest/gtest.h>

#include <string>

#include "train/recipe_run.hpp"

namespace mantissa {
namespace {

TEST(LlamaRecipes, EveryRecipeTrainsWithItsCasts) {
  const recipe_test::TinyRun run("llama");
  recipe_test::expect_every_recipe_trains("llama", [&](const std::string& r) {
    train::TrainConfig c = run.config(r);
    c.kv_heads = 2;
    return c;
  }, [](train::Session& s) {
    if (const int64_t r = recipe_test::scalify_rescales(s); r >= 0) {
      EXPECT_EQ(r, 2 * 2 + 1);
    }
  });
}

}  // namespace
}  // namespace mantissa
