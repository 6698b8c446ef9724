// A Llama directory mantissa saved, against Hugging Face transformers' own
// LlamaForCausalLM: tests/golden/make_golden_llama_hf.py loaded the directory
// strictly (no missing or unexpected names) and wrote transformers' logits.
// Here mantissa loads the same directory and must compute the same logits;
// and a directory mantissa saves again holds exactly the names and shapes
// transformers loaded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "golden/golden.hpp"
#include "mantissa/train/checkpoint.hpp"
#include "mantissa/io/safetensors.hpp"
#include "mantissa/nn/llama.hpp"

namespace mantissa {
namespace {
namespace fs = std::filesystem;

const std::string kDir = std::string(MANTISSA_SOURCE_DIR) + "/tests/golden/data/llama_hf";

TEST(HfLlama, LogitsMatchTransformers) {
  nn::Llama model(nn::LlamaConfig::from_json(io::read_model_config(kDir)));
  io::load_model_weights(kDir, model);
  const io::SafetensorsFile g = io::load_safetensors(kDir + "/hf_logits.safetensors");
  const Tensor logits = model.logits(g.tensors.at("ids"));
  const double rel = golden::rel_max_diff(logits, g.tensors.at("logits"));
  std::printf("logits rel max diff vs transformers (fp32, %s): %.2e\n", g.metadata.at("generator").c_str(), rel);
  // transformers computes in fp32 with fp32 rotary angles: a few fp32 ulps of the logits' range.
  EXPECT_LE(rel, 1e-5);
}

TEST(HfLlama, SavedNamesAreWhatTransformersLoaded) {
  nn::Llama model(nn::LlamaConfig::from_json(io::read_model_config(kDir)));
  io::load_model_weights(kDir, model);
  const fs::path out = fs::temp_directory_path() / ("mantissa_hf_llama_" + std::to_string(::getpid()));
  io::save_model(out.string(), model);
  const io::SafetensorsFile a = io::load_safetensors(kDir + "/model.safetensors");
  const io::SafetensorsFile b = io::load_safetensors((out / "model.safetensors").string());
  std::set<std::string> na, nb;
  for (const auto& [k, v] : a.tensors) na.insert(k + shape_str(v.shape()));
  for (const auto& [k, v] : b.tensors) nb.insert(k + shape_str(v.shape()));
  EXPECT_EQ(na, nb);
  EXPECT_TRUE(nb.count("model.layers.1.self_attn.k_proj.weight[16, 32]")) << "GQA: 2 kv heads of 8";
  EXPECT_TRUE(nb.count("lm_head.weight[256, 32]"));
  const nn::LlamaConfig c = nn::LlamaConfig::from_json(io::read_model_config(out.string()));
  EXPECT_EQ(c.kv(), 2);
  EXPECT_EQ(c.ffn(), 64);
  fs::remove_all(out);
}

}  // namespace
}  // namespace mantissa
