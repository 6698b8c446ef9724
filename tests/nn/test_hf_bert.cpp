// A BERT directory mantissa saved, against Hugging Face transformers' own
// BertForMaskedLM: tests/golden/make_golden_bert_hf.py loaded the directory
// strictly (no missing or unexpected names) and wrote transformers' logits
// for right-padded rows with the matching attention mask and token types.
// Here mantissa loads the same directory and must compute the same logits;
// and a directory mantissa saves again holds exactly the names and shapes
// transformers loaded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "golden/golden.hpp"
#include "mantissa/io/safetensors.hpp"
#include "mantissa/nn/bert.hpp"
#include "mantissa/train/checkpoint.hpp"

namespace mantissa {
namespace {
namespace fs = std::filesystem;

const std::string kDir = std::string(MANTISSA_SOURCE_DIR) + "/tests/golden/data/bert_hf";

TEST(HfBert, LogitsMatchTransformers) {
  nn::Bert model(nn::BertConfig::from_json(io::read_model_config(kDir)));
  io::load_model_weights(kDir, model);
  const io::SafetensorsFile g = io::load_safetensors(kDir + "/hf_logits.safetensors");
  const Tensor logits = model.logits(g.tensors.at("ids"));
  const double rel = golden::rel_max_diff(logits, g.tensors.at("logits"));
  std::printf("logits rel max diff vs transformers (fp32, %s): %.2e\n", g.metadata.at("generator").c_str(), rel);
  EXPECT_LE(rel, 1e-5);
}

TEST(HfBert, SavedNamesAreWhatTransformersLoaded) {
  nn::Bert model(nn::BertConfig::from_json(io::read_model_config(kDir)));
  io::load_model_weights(kDir, model);
  const fs::path out = fs::temp_directory_path() / ("mantissa_hf_bert_" + std::to_string(::getpid()));
  io::save_model(out.string(), model);
  const io::SafetensorsFile a = io::load_safetensors(kDir + "/model.safetensors");
  const io::SafetensorsFile b = io::load_safetensors((out / "model.safetensors").string());
  std::set<std::string> na, nb;
  for (const auto& [k, v] : a.tensors) na.insert(k + shape_str(v.shape()));
  for (const auto& [k, v] : b.tensors) nb.insert(k + shape_str(v.shape()));
  EXPECT_EQ(na, nb);
  EXPECT_TRUE(nb.count("cls.predictions.bias[260]"));
  EXPECT_TRUE(nb.count("bert.embeddings.token_type_embeddings.weight[2, 32]"));
  fs::remove_all(out);
}

}  // namespace
}  // namespace mantissa
