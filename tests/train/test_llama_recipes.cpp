// Every registered recipe on the Llama-style decoder: a few training steps
// from the library's session (the same path as `mantissa train --model
// llama`), finite losses, and the recipe's operand casts really happen on
// this model (counted at the quantiser each recipe installs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "train/recipe_run.hpp"

namespace mantissa {
namespace {
namespace fs = std::filesystem;

class LlamaRecipes : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mantissa_llama_recipes_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::mt19937_64 rng(5);
    const char* words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "lazy ", "dog", ".\n", ", "};
    std::string text;
    while (text.size() < 8000) text += words[rng() % std::size(words)];
    std::ofstream(dir_ / "corpus.txt") << text;
  }
  void TearDown() override { fs::remove_all(dir_); }
  train::TrainConfig tiny(const std::string& recipe) const {
    train::TrainConfig c;
    c.model = "llama";
    c.data = (dir_ / "corpus.txt").string();
    c.layers = 2;
    c.d_model = 32;
    c.heads = 4;
    c.kv_heads = 2;
    c.seq_len = 16;
    c.batch_size = 4;
    c.steps = 3;
    c.warmup = 1;
    c.eval_batches = 1;
    c.threads = 1;
    c.recipe = recipe;
    return c;
  }
  fs::path dir_;
};

TEST_F(LlamaRecipes, EveryRecipeTrainsWithItsCasts) {
  recipe_test::expect_every_recipe_trains("llama", [this](const std::string& r) { return tiny(r); });
}

}  // namespace
}  // namespace mantissa
