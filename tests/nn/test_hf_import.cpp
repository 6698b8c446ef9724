// Models written by Hugging Face transformers' save_pretrained, read as a user's
// checkpoint is (tests/golden/make_golden_hf_import.py): the kind detected from
// config.json, the weights by name (a bfloat16 Llama widened exactly). mantissa's
// logits and mean next-token loss must equal transformers' (fp32, 1e-5
// relative), also after mantissa saves the model and reads its save back; and
// a GPT-2 mantissa fine-tuned and saved, which transformers loaded strictly,
// gives transformers' logits too.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "golden/golden.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/io/safetensors.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/train/checkpoint.hpp"
#include "temp_dir.hpp"

namespace mantissa {
namespace {

std::string dir_of(const std::string& name) {
  return std::string(MANTISSA_SOURCE_DIR) + "/tests/golden/data/hf_import_" + name;
}

std::unique_ptr<nn::Model> load(const std::string& dir) {
  const std::string cfg = train::read_model_config(dir);
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

}  // namespace
}  // namespace mantissa
