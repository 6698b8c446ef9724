// A BERT directory mantissa saved, against Hugging Face transformers' own
// BertForMaskedLM: tests/golden/make_golden_bert_hf.py loaded the directory
// strictly (no missing or unexpected names) and wrote transformers' logits
// for right-padded rows with the matching attention mask and token types.
// Here mantissa loads the same directory and must compute the same logits;
// and a directory mantissa saves again holds exactly the names and shapes
// transformers loaded.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "mantissa/nn/bert.hpp"
#include "nn/hf_model.hpp"
#include "temp_dir.hpp"

namespace mantissa {
namespace {

const std::string kDir = hf_test::hf_dir("bert");

TEST(HfBert, LogitsMatchTransformers) {
  hf_test::expect_transformers_logits(*hf_test::load<nn::Bert, nn::BertConfig>(kDir), kDir);
}

TEST(HfBert, SavedNamesAreWhatTransformersLoaded) {
  const auto model = hf_test::load<nn::Bert, nn::BertConfig>(kDir);
  const TempDir out("hf_bert");
  const std::set<std::string> names = hf_test::expect_saved_as_loaded(*model, kDir, out / "model");
  EXPECT_TRUE(names.count("cls.predictions.bias[260]"));
  EXPECT_TRUE(names.count("bert.embeddings.token_type_embeddings.weight[2, 32]"));
}

}  // namespace
}  // namespace mantissa
