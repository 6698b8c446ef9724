// Every key of a model's config.json that changes the function is honoured
// or refused by name: a config asking for another activation, position
// scheme, norm epsilon, head size or dropout than the model computes is never
// read as if it asked for the model's own (the values below are the ones
// Hugging Face's configs use for the alternatives).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "mantissa/nn/bert.hpp"
#include "mantissa/nn/gpt.hpp"
#include "mantissa/nn/llama.hpp"
#include "error_of.hpp"

using namespace mantissa;
using nlohmann::json;

namespace {

using test_util::error_of;

struct Case {
  const char* key;
  json value;
};

// A one-block model of width 16 (the sizes every kind shares).
template <class Config>
Config small_config() {
  Config c;
  if constexpr (requires { c.vocab = 64; }) c.vocab = 64;
  c.context = 16;
  c.layers = 1;
  c.d_model = 16;
  c.heads = 2;
  return c;
}

template <class Config>
json small() {
  return json::parse(small_config<Config>().to_json());
}

// Each case refused with a message naming its key; the config it was made
// from still reads.
template <class Config>
void expect_refused(const json& base, std::initializer_list<Case> cases) {
  EXPECT_NO_THROW(Config::from_json(base.dump()));
  for (const Case& c : cases) {
    json j = base;
    j[c.key] = c.value;
    const std::string e = error_of([&] { Config::from_json(j.dump()); });
    EXPECT_NE(e.find(std::string("'") + c.key + "'"), std::string::npos) << c.key << " = " << c.value << ": " << e;
  }
}

}  // namespace

TEST(ConfigKeys, LlamaRefusesWhatItDoesNotCompute) {
  expect_refused<nn::LlamaConfig>(small<nn::LlamaConfig>(), {{"hidden_act", "gelu"},
                                                  {"rope_scaling", {{"type", "linear"}, {"factor", 4}}},
                                                  {"head_dim", 4},
                                                  {"attention_bias", true},
                                                  {"mlp_bias", true},
                                                  {"attention_dropout", 0.1},
                                                  {"model_type", "mistral"}});
}

TEST(ConfigKeys, LlamaEpsilonsAreCheckedInFloat32AndHonoured) {
  json j = small<nn::LlamaConfig>();
  j["rms_norm_eps"] = 1e300;  // finite as a double, inf as the float the norm adds
  EXPECT_NE(error_of([&] { nn::LlamaConfig::from_json(j.dump()); }).find("rms_norm_eps"), std::string::npos);
  j["rms_norm_eps"] = 1e-50;  // zero in float32
  EXPECT_NE(error_of([&] { nn::LlamaConfig::from_json(j.dump()); }).find("rms_norm_eps"), std::string::npos);
  j["rms_norm_eps"] = 1e-6;
  EXPECT_EQ(nn::LlamaConfig::from_json(j.dump()).rms_eps, 1e-6);
  j["rope_theta"] = 1e300;
  EXPECT_NE(error_of([&] { nn::LlamaConfig::from_json(j.dump()); }).find("rope_theta"), std::string::npos);
  // transformers 5's spelling: rope_parameters.rope_theta is honoured, other rotary settings refused.
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  EXPECT_EQ(nn::LlamaConfig::from_json(j.dump()).rope_theta, 500000.0);
  j["rope_theta"] = 10000.0;
  EXPECT_NE(error_of([&] { nn::LlamaConfig::from_json(j.dump()); }).find("disagree"), std::string::npos);
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 500000.0}, {"factor", 4}};
  EXPECT_NE(error_of([&] { nn::LlamaConfig::from_json(j.dump()); }).find("rope_type"), std::string::npos);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}, {"factor", 4}};
  EXPECT_NE(error_of([&] { nn::LlamaConfig::from_json(j.dump()); }).find("rope_parameters.factor"), std::string::npos);
}

// GPT-2's attention dropout (attn_pdrop, 0.1 in GPT-2's own config) is read:
// evaluation does not apply it, training refuses it (cannot_train) until the
// run sets the rates (set_dropout), and a save writes what the model applies.
TEST(ConfigKeys, GptAttentionDropoutIsReadAndItsTrainingRefused) {
  json g = small<nn::GPTConfig>();
  g["attn_pdrop"] = 0.1;
  const nn::GPTConfig c = nn::GPTConfig::from_json(g.dump());
  EXPECT_FLOAT_EQ(c.attn_dropout, 0.1f);
  nn::GPT model(c);
  EXPECT_NE(model.cannot_train().find("attn_pdrop"), std::string::npos) << model.cannot_train();
  model.set_dropout(0.05f);
  EXPECT_EQ(model.cannot_train(), "");
  const json saved = json::parse(model.config_json());
  EXPECT_FLOAT_EQ(saved["attn_pdrop"].get<float>(), 0.0f);
  EXPECT_FLOAT_EQ(saved["resid_pdrop"].get<float>(), 0.05f);
}

TEST(ConfigKeys, BertRefusesWhatItDoesNotCompute) {
  expect_refused<nn::BertConfig>(small<nn::BertConfig>(), {{"hidden_act", "relu"},
                                                {"hidden_act", "silu"},
                                                {"position_embedding_type", "relative_key"},
                                                {"layer_norm_eps", -1.0},
                                                {"hidden_dropout_prob", 1.5},
                                                {"tie_word_embeddings", false},
                                                {"is_decoder", true},
                                                {"add_cross_attention", true}});
}

// What BertForMaskedLM's config holds beside the shape is read: the GELU form
// (transformers' "gelu" is the erf one), the LayerNorm epsilon and the
// dropout rates, which training refuses until the run sets them to 0.
TEST(ConfigKeys, BertReadsItsActivationEpsilonAndDropout) {
  json b = small<nn::BertConfig>();
  b["hidden_act"] = "gelu";
  b["layer_norm_eps"] = 1e-12;
  b["hidden_dropout_prob"] = 0.1;
  nn::BertConfig c = nn::BertConfig::from_json(b.dump());
  EXPECT_EQ(c.gelu_form, kernels::GeluForm::erf);
  EXPECT_EQ(c.layer_norm_eps, 1e-12);
  EXPECT_EQ(c.hidden_dropout, 0.1);
  const json saved = json::parse(c.to_json());
  EXPECT_EQ(saved["hidden_act"], "gelu");
  EXPECT_EQ(saved["layer_norm_eps"].get<double>(), 1e-12);
  c.layers = 1;
  nn::Bert model(c);
  EXPECT_NE(model.cannot_train().find("hidden_dropout_prob"), std::string::npos) << model.cannot_train();
  EXPECT_THROW(model.set_dropout(0.1f), std::invalid_argument);
  model.set_dropout(0.0f);
  EXPECT_EQ(model.cannot_train(), "");
  b.erase("hidden_act");
  b.erase("layer_norm_eps");
  c = nn::BertConfig::from_json(b.dump());  // transformers' defaults
  EXPECT_EQ(c.gelu_form, kernels::GeluForm::erf);
  EXPECT_EQ(c.layer_norm_eps, 1e-12);
}

TEST(ConfigKeys, GptRefusesWhatItDoesNotCompute) {
  expect_refused<nn::GPTConfig>(small<nn::GPTConfig>(), {{"activation_function", "relu"},
                                              {"n_inner", 100},
                                              {"n_ctx", 8},
                                              {"layer_norm_epsilon", 1e-6},
                                              {"embd_pdrop", 0.1},  // the model has one rate: mantissa.dropout (0)
                                              {"scale_attn_weights", false},
                                              {"scale_attn_by_inverse_layer_idx", true},
                                              {"tie_word_embeddings", false}});
}

TEST(ConfigKeys, EquivalentSpellingsAreAccepted) {
  json g = small<nn::GPTConfig>();
  g["activation_function"] = "gelu_pytorch_tanh";
  g["n_inner"] = 64;  // 4 n_embd, spelled out
  g["attn_pdrop"] = 0;  // an integer zero is 0.0
  EXPECT_NO_THROW(nn::GPTConfig::from_json(g.dump()));
  json b = small<nn::BertConfig>();
  b["hidden_act"] = "gelu_pytorch_tanh";
  b["layer_norm_eps"] = 0.00001;
  EXPECT_NO_THROW(nn::BertConfig::from_json(b.dump()));
  json l = small<nn::LlamaConfig>();
  l["head_dim"] = 8;  // 16 / 2
  l.erase("rope_scaling");
  EXPECT_NO_THROW(nn::LlamaConfig::from_json(l.dump()));
  // A dropout rate saved from a float reads back as its double.
  auto c = small_config<nn::GPTConfig>();
  c.dropout = 0.1f;
  EXPECT_FLOAT_EQ(nn::GPTConfig::from_json(c.to_json()).dropout, 0.1f);
}

TEST(ConfigKeys, BertVocabularyIsBoundedBeforeArithmetic) {
  json j = small<nn::BertConfig>();
  for (const int64_t v : {std::numeric_limits<int64_t>::min(), int64_t{-2}, int64_t{0}}) {
    j["vocab_size"] = v;
    EXPECT_NE(error_of([&] { nn::BertConfig::from_json(j.dump()); }).find("vocab_size"), std::string::npos) << v;
  }
}
