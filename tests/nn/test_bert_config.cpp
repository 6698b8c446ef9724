// BertConfig's config.json: what it writes reads back to the same model (standard and
// unit-scaled, post- and pre-norm), and bad input names the problem.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "mantissa/nn/bert.hpp"

using namespace mantissa;

TEST(BertConfig, RoundTripsThroughConfigJson) {
  nn::BertConfig c;
  c.context = 32;
  c.layers = 3;
  c.d_model = 48;
  c.heads = 6;
  c.hidden = 100;
  c.pre_norm = true;
  c.seed = 9;
  c.unit.enabled = true;
  c.unit.tau_attn = 0.2;
  const nn::BertConfig r = nn::BertConfig::from_json(c.to_json());
  EXPECT_EQ(r.byte_vocab, 256);
  EXPECT_EQ(r.vocab(), 260);
  EXPECT_EQ(r.context, 32);
  EXPECT_EQ(r.layers, 3);
  EXPECT_EQ(r.d_model, 48);
  EXPECT_EQ(r.heads, 6);
  EXPECT_EQ(r.ffn(), 100);
  EXPECT_TRUE(r.pre_norm);
  EXPECT_EQ(r.seed, 9u);
  EXPECT_TRUE(r.unit.enabled);
  EXPECT_DOUBLE_EQ(r.unit.tau_attn, 0.2);
  const nlohmann::json j = nlohmann::json::parse(c.to_json());
  EXPECT_EQ(j["model_type"], "bert");
  EXPECT_EQ(j["pad_token_id"], 259);
  EXPECT_EQ(j["hidden_act"], "gelu_new");
  // The pre-norm model has the final LayerNorm; the post-norm one does not.
  nn::Bert pre(c);
  c.pre_norm = false;
  nn::Bert post(c);
  EXPECT_NE(pre.find("bert.encoder.LayerNorm.weight"), nullptr);
  EXPECT_EQ(post.find("bert.encoder.LayerNorm.weight"), nullptr);
  EXPECT_EQ(pre.parameters().size(), post.parameters().size() + 2);
}

TEST(BertConfig, BadInputIsNamed) {
  const std::string good = nn::BertConfig{}.to_json();
  auto with = [&](const std::string& key, const nlohmann::json& v) {
    nlohmann::json j = nlohmann::json::parse(good);
    j[key] = v;
    return j.dump();
  };
  auto expect_error = [](const std::string& text, const std::string& words) {
    try {
      nn::BertConfig::from_json(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_error("[1, 2]", "not a JSON object");
  expect_error(with("hidden_size", "wide"), "'hidden_size' must be an integer");
  expect_error(with("num_attention_heads", 5), "not a multiple of heads");
  expect_error(with("vocab_size", 100), "byte_vocab");
  expect_error(with("max_position_embeddings", int64_t{1} << 30), "context");
  expect_error(with("type_vocab_size", 1), "type_vocab_size");
  nlohmann::json j = nlohmann::json::parse(good);
  j["mantissa"]["norm"] = "middle";
  expect_error(j.dump(), "norm must be pre or post");
  j = nlohmann::json::parse(good);
  j.erase("num_hidden_layers");
  expect_error(j.dump(), "missing key 'num_hidden_layers'");
}
