// A Llama directory mantissa saved, against Hugging Face transformers' own
// LlamaForCausalLM: tests/golden/make_golden_llama_hf.py loaded the directory
// strictly (no missing or unexpected names) and wrote transformers' logits.
// Here mantissa loads the same directory and must compute the same logits;
// and a directory mantissa saves again holds exactly the names and shapes
// transformers loaded.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "mantissa/nn/llama.hpp"
#include "nn/hf_model.hpp"
#include "temp_dir.hpp"

namespace mantissa {
namespace {

const std::string kDir = hf_test::hf_dir("llama");

// transformers computes in fp32 with fp32 rotary angles: a few fp32 ulps of the logits' range.
TEST(HfLlama, LogitsMatchTransformers) {
  hf_test::expect_transformers_logits(*hf_test::load<nn::Llama, nn::LlamaConfig>(kDir), kDir);
}

TEST(HfLlama, SavedNamesAreWhatTransformersLoaded) {
  const auto model = hf_test::load<nn::Llama, nn::LlamaConfig>(kDir);
  const TempDir out("hf_llama");
  const std::set<std::string> names = hf_test::expect_saved_as_loaded(*model, kDir, out / "model");
  EXPECT_TRUE(names.count("model.layers.1.self_attn.k_proj.weight[16, 32]")) << "GQA: 2 kv heads of 8";
  EXPECT_TRUE(names.count("lm_head.weight[256, 32]"));
  const nn::LlamaConfig c = nn::LlamaConfig::from_json(train::read_model_config(out / "model"));
  EXPECT_EQ(c.kv(), 2);
  EXPECT_EQ(c.ffn(), 64);
}

}  // namespace
}  // namespace mantissa
