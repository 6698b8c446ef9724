// Models written by Hugging Face transformers' save_pretrained, read as a user's
// checkpoint is (tests/golden/make_golden_hf_import.py): the kind detected from
// config.json, the weights by name (a bfloat16 Llama widened exactly). mantissa's
// logits and mean next-token loss must equal transformers' (fp32, 1e-5
// relative), also after mantissa saves the model and reads its save back; and
// a GPT-2 mantissa fine-tuned and saved, which transformers loaded strictly,
// gives transformers' logits too. A default BertForMaskedLM (exact GELU,
// layer_norm_eps 1e-12, a WordPiece vocabulary of 1000 whose special ids its
// tokenizer files name) gives transformers' masked-LM loss and logits, also
// after a save and after mantissa fine-tuned it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "golden/golden.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/io/safetensors.hpp"
#include "mantissa/nn/bert.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/train/checkpoint.hpp"
#include "temp_dir.hpp"

namespace mantissa {
namespace {

std::string dir_of(const std::string& name) {
  return std::string(MANTISSA_SOURCE_DIR) + "/tests/golden/data/hf_import_" + name;
}

std::unique_ptr<nn::Model> load(const std::string& dir) {
  const std::string cfg = nn::bert_config_with_special_ids(train::read_model_config(dir), dir);
  const nn::ModelKind* kind = nn::find_model_kind(nn::detect_model_kind(cfg));
  EXPECT_NE(kind, nullptr) << dir;
  if (kind == nullptr) return nullptr;
  std::unique_ptr<nn::Model> model = kind->load(cfg);
  train::load_model_weights(dir, *model);
  return model;
}

// The mean loss of predicting ids[:, t + 1] from ids[:, :t + 1], as transformers computes it.
double mean_loss(nn::Model& model, const Tensor& ids) {
  const int64_t B = ids.dim(0), T = ids.dim(1);
  Tensor targets = Tensor::empty({B, T}, DType::i32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) targets.data<int32_t>()[b * T + t] = t + 1 < T ? ids.data<int32_t>()[b * T + t + 1] : -1;
  const nn::LossSum l = model.evaluate({ids, targets});
  return l.sum / static_cast<double>(l.count);
}

// Logits and loss of the model in `dir` against transformers' (hf_logits.safetensors).
void expect_transformers(nn::Model& model, const std::string& dir) {
  const io::SafetensorsFile g = io::load_safetensors(dir + "/hf_logits.safetensors");
  const Tensor& ids = g.tensors.at("ids");
  const double rel = golden::rel_max_diff(model.logits(ids), g.tensors.at("logits"));
  const double want = std::stod(g.metadata.at("loss")), loss = mean_loss(model, ids);
  std::printf("%s: logits rel max diff %.2e, loss %.7f vs %.7f (%s)\n", dir.c_str(), rel, loss, want,
              g.metadata.at("generator").c_str());
  EXPECT_LE(rel, 1e-5);
  EXPECT_LE(std::abs(loss - want), 1e-5 * want);
}

class HfImport : public ::testing::TestWithParam<const char*> {};

TEST_P(HfImport, LogitsAndLossMatchTransformersBeforeAndAfterASave) {
  const std::string dir = dir_of(GetParam());
  const std::unique_ptr<nn::Model> model = load(dir);
  ASSERT_TRUE(model);
  expect_transformers(*model, dir);
  const TempDir out("hf_import");
  train::save_model(out / "saved", *model);
  const std::unique_ptr<nn::Model> again = load(out / "saved");
  ASSERT_TRUE(again);
  const Tensor ids = io::load_safetensors(dir + "/hf_logits.safetensors").tensors.at("ids");
  EXPECT_EQ(golden::rel_max_diff(again->logits(ids), model->logits(ids)), 0.0) << "the save changed the model";
}

INSTANTIATE_TEST_SUITE_P(Models, HfImport, ::testing::Values("gpt2", "llama"));

TEST(HfImport, AFineTunedGpt2SavedByMantissaGivesTransformersLogits) {
  const std::string dir = dir_of("gpt2_tuned");
  const std::unique_ptr<nn::Model> model = load(dir);
  ASSERT_TRUE(model);
  expect_transformers(*model, dir);
}

// A file saved from the base model (GPT2Model: "h.0.attn.c_attn.weight", as
// the hub's gpt2 checkpoint) loads into the LM, whose head is tied.
TEST(HfImport, AGpt2BaseModelFileLoadsWithoutItsPrefix) {
  const std::string dir = dir_of("gpt2");
  io::SafetensorsFile f = io::load_safetensors(dir + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> base;
  for (const auto& [name, t] : f.tensors) base.emplace_back(name.substr(std::string("transformer.").size()), t);
  const TempDir out("hf_import_base");
  out.write("base/config.json", io::read_file(dir + "/config.json"));
  out.write("base/model.safetensors", io::encode_safetensors(base, f.metadata));
  const std::unique_ptr<nn::Model> model = load(out / "base");
  ASSERT_TRUE(model);
  expect_transformers(*model, dir);
}

// GPT-2's attention dropout is read, not refused: evaluation does not apply
// it, and training refuses it until the run sets the rates.
TEST(HfImport, Gpt2AttentionDropoutRefusesTrainingUntilTheRunSetsIt) {
  const std::unique_ptr<nn::Model> model = load(dir_of("gpt2"));
  ASSERT_TRUE(model);
  EXPECT_NE(model->cannot_train().find("attn_pdrop"), std::string::npos) << model->cannot_train();
  model->set_dropout(0.1f);
  EXPECT_EQ(model->cannot_train(), "");
}

// ---- BERT ------------------------------------------------------------------------------------
// The largest |a - b| over the non-padding rows of logits [B, T, V] relative to max |b| there.
double rel_diff_unpadded(const Tensor& a, const Tensor& b, const Tensor& ids, int32_t pad) {
  const int64_t V = b.dim(2), N = ids.numel();
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (ids.data<int32_t>()[i] == pad) continue;
    for (int64_t v = 0; v < V; ++v) {
      diff = std::max(diff, std::abs(double{a.f32()[i * V + v]} - double{b.f32()[i * V + v]}));
      scale = std::max(scale, std::abs(double{b.f32()[i * V + v]}));
    }
  }
  return diff / scale;
}

void expect_bert_matches_transformers(nn::Model& model, const std::string& dir) {
  const io::SafetensorsFile g = io::load_safetensors(dir + "/hf_logits.safetensors");
  const Tensor &ids = g.tensors.at("ids"), &targets = g.tensors.at("targets");
  const nn::LossSum l = model.evaluate({ids, targets});
  const double loss = l.sum / static_cast<double>(l.count), want = std::stod(g.metadata.at("loss"));
  const double rel = rel_diff_unpadded(model.logits(ids), g.tensors.at("logits"), ids, std::stoi(g.metadata.at("pad")));
  std::printf("%s: masked-LM loss %.8f vs %.8f over %ld targets, logits rel max diff %.2e (%s)\n", dir.c_str(), loss,
              want, static_cast<long>(l.count), rel, g.metadata.at("generator").c_str());
  EXPECT_LE(std::abs(loss - want), 1e-5 * want);
  EXPECT_LE(rel, 1e-5);
}

TEST(HfImportBert, ADefaultBertForMaskedLmGivesTransformersLossBeforeAndAfterASave) {
  const std::string dir = dir_of("bert");
  const std::unique_ptr<nn::Model> model = load(dir);
  ASSERT_TRUE(model);
  const nn::BertConfig& c = dynamic_cast<const nn::Bert&>(*model).config();
  EXPECT_EQ(c.gelu_form, kernels::GeluForm::erf);
  EXPECT_EQ(c.layer_norm_eps, 1e-12);
  EXPECT_EQ(c.vocab(), 1000);
  const io::SafetensorsFile g = io::load_safetensors(dir + "/hf_logits.safetensors");
  EXPECT_EQ(c.cls_id(), std::stoi(g.metadata.at("cls")));
  EXPECT_EQ(c.sep_id(), std::stoi(g.metadata.at("sep")));
  EXPECT_EQ(c.mask_id(), std::stoi(g.metadata.at("mask")));
  EXPECT_EQ(c.pad_id(), std::stoi(g.metadata.at("pad")));
  EXPECT_NE(model->cannot_train().find("hidden_dropout_prob"), std::string::npos) << model->cannot_train();
  expect_bert_matches_transformers(*model, dir);
  // The save keeps the ids in config.json: it loads without the tokenizer files.
  const TempDir out("hf_import_bert");
  train::save_model(out / "saved", *model);
  const std::unique_ptr<nn::Model> again = load(out / "saved");
  ASSERT_TRUE(again);
  EXPECT_EQ(dynamic_cast<const nn::Bert&>(*again).config().mask_id(), c.mask_id());
  EXPECT_EQ(golden::rel_max_diff(again->logits(g.tensors.at("ids")), model->logits(g.tensors.at("ids"))), 0.0);
}

TEST(HfImportBert, ABertMantissaFineTunedAndSavedGivesTransformersLogits) {
  const std::unique_ptr<nn::Model> model = load(dir_of("bert_tuned"));
  ASSERT_TRUE(model);
  expect_bert_matches_transformers(*model, dir_of("bert_tuned"));
}

// The special ids from each of the files transformers may write, by the
// names special_tokens_map.json gives, and a [PAD] that disagrees.
TEST(HfImportBert, SpecialIdsComeFromTheTokenizerFiles) {
  const std::string cfg = io::read_file(dir_of("bert") + "/config.json");
  auto ids = [&](const TempDir& d) {
    const nn::BertConfig c = nn::BertConfig::from_json(nn::bert_config_with_special_ids(cfg, d / "m"));
    return std::vector<int32_t>{c.cls_id(), c.sep_id(), c.mask_id()};
  };
  const TempDir none("bert_ids_none");
  none.write("m/config.json", cfg);
  EXPECT_EQ(ids(none), (std::vector<int32_t>{-1, -1, -1}));
  const TempDir txt("bert_ids_vocab_txt");
  txt.write("m/special_tokens_map.json", R"({"cls_token": "<s>", "sep_token": {"content": "</s>"}, "mask_token": "<mask>"})");
  txt.write("m/vocab.txt", "[PAD]\n</s>\nhello\n<mask>\n<s>\n");
  EXPECT_EQ(ids(txt), (std::vector<int32_t>{4, 1, 3}));
  const TempDir decoder("bert_ids_decoder");
  decoder.write("m/tokenizer_config.json", R"({"added_tokens_decoder": {"0": {"content": "[PAD]"}, "7": {"content": "[CLS]"},
                                               "8": {"content": "[SEP]"}, "9": {"content": "[MASK]"}}})");
  EXPECT_EQ(ids(decoder), (std::vector<int32_t>{7, 8, 9}));
  const TempDir pad("bert_ids_pad");
  pad.write("m/vocab.txt", "[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\n");  // [PAD] is 1, config.json says 0
  EXPECT_THROW(nn::bert_config_with_special_ids(cfg, pad / "m"), std::invalid_argument);
}

// hidden_act selects the GELU or is refused by name; type_vocab_size 1 gives every token type 0.
TEST(HfImportBert, ConfigKeysAreHonouredOrRefused) {
  nlohmann::json j = nlohmann::json::parse(io::read_file(dir_of("bert") + "/config.json"));
  j["hidden_act"] = "gelu_new";
  EXPECT_EQ(nn::BertConfig::from_json(j.dump()).gelu_form, kernels::GeluForm::tanh);
  j["hidden_act"] = "relu";
  try {
    (void)nn::BertConfig::from_json(j.dump());
    ADD_FAILURE() << "relu accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("hidden_act"), std::string::npos) << e.what();
  }
  j["hidden_act"] = "gelu";
  j["position_embedding_type"] = "relative_key";
  EXPECT_THROW((void)nn::BertConfig::from_json(j.dump()), std::invalid_argument);
  j.erase("position_embedding_type");
  j["type_vocab_size"] = 1;
  j["mantissa"] = {{"cls_token_id", 2}, {"sep_token_id", 3}, {"mask_token_id", 4}};
  const nn::BertConfig c = nn::BertConfig::from_json(j.dump());
  Tensor ids = Tensor::empty({1, 6}, DType::i32);
  const int32_t row[6] = {2, 10, 3, 11, 3, 0};
  std::copy(row, row + 6, ids.data<int32_t>());
  const nn::BertInputs in = nn::bert_inputs(c, ids);
  for (int t = 0; t < 6; ++t) EXPECT_EQ(in.token_types.data<int32_t>()[t], 0) << t;
  EXPECT_EQ(in.key_len.data<int32_t>()[0], 5);
}

}  // namespace
}  // namespace mantissa
