// Every registered recipe on the Llama-style decoder: a few training steps
// from the library's session (the same path as `mantissa train --model
// llama`), finite losses, and the recipe's operand casts really happen on
// this model (counted at the quantiser each recipe installs).
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
  });
}

}  // namespace
}  // namespace mantissa
