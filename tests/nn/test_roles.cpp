// Parameter roles, blocks and links of the library's models against what
// their Hugging Face names say (the names are the reference: GPT-2 and
// LlamaForCausalLM layouts), and each model kind found back from its config.json.
#include <gtest/gtest.h>

#include <string>

#include "mantissa/nn/models.hpp"

using namespace mantissa;
using autograd::Role;

namespace {

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// The role a parameter's Hugging Face name implies.
Role role_from_name(const std::string& kind, const std::string& n, bool last_mlp_layer) {
  if (n == "transformer.wte.weight" || n == "model.embed_tokens.weight") return Role::token_embedding;
  if (n == "transformer.wpe.weight") return Role::position_embedding;
  if (n == "lm_head.weight" || (kind == "mlp" && last_mlp_layer && ends_with(n, ".weight"))) return Role::readout;
  const bool norm = n.find("ln_") != std::string::npos || n.find("norm") != std::string::npos;
  if (norm) return ends_with(n, ".bias") ? Role::norm_bias : Role::norm_gain;
  return ends_with(n, ".bias") ? Role::bias : Role::weight;
}

// The block index in "transformer.h.<i>." / "model.layers.<i>.", else -1.
int block_from_name(const std::string& n) {
  for (const std::string pre : {"transformer.h.", "model.layers."})
    if (n.rfind(pre, 0) == 0) return std::stoi(n.substr(pre.size()));
  return -1;
}

void check(const std::string& kind, const nn::ModelSize& size) {
  const nn::ModelKind* k = nn::find_model_kind(kind);
  ASSERT_NE(k, nullptr);
  auto model = k->make(size);
  EXPECT_EQ(nn::detect_model_kind(model->config_json()), kind);
  const auto params = model->parameters();
  const std::string last = "layers." + std::to_string(size.layers) + ".";
  int norms = 0, in_blocks = 0;
  for (const autograd::Parameter* p : params) {
    const Role want = role_from_name(kind, p->name, p->name.rfind(last, 0) == 0);
    EXPECT_EQ(autograd::role_name(p->role), std::string(autograd::role_name(want))) << p->name;
    EXPECT_EQ(p->block, kind == "mlp" ? -1 : block_from_name(p->name)) << p->name;
    EXPECT_EQ(p->decay, autograd::decays(p->role)) << p->name;
    norms += autograd::is_norm(p->role);
    in_blocks += p->block >= 0;
    if (p->bias) {  // "<x>.weight" -> "<x>.bias"
      ASSERT_TRUE(ends_with(p->name, ".weight")) << p->name;
      EXPECT_EQ(p->bias->name, p->name.substr(0, p->name.size() - 6) + "bias");
    }
  }
  const int64_t L = size.layers;
  if (kind == "gpt") {
    EXPECT_EQ(norms, 4 * L + 2);       // ln_1, ln_2 gain and shift per block, ln_f
    EXPECT_EQ(in_blocks, 12 * L);
  } else if (kind == "llama") {
    EXPECT_EQ(norms, 2 * L + 1);       // two RMSNorm gains per block, the final norm
    EXPECT_EQ(in_blocks, 9 * L);
  } else {
    EXPECT_EQ(norms, 0);
    EXPECT_EQ(in_blocks, 0);
  }
  EXPECT_EQ(model->blocks(), kind == "mlp" ? 0 : L);
  EXPECT_EQ(model->context_length(), kind == "mlp" ? 0 : size.context);
  EXPECT_EQ(model->task(), kind == "mlp" ? nn::Model::Task::classifier : nn::Model::Task::language_model);
  EXPECT_EQ(model->unit().enabled, size.unit.enabled);
}

nn::ModelSize small(bool unit) {
  nn::ModelSize s;
  s.context = 16;
  s.layers = 3;
  s.d_model = 32;
  s.heads = 2;
  s.unit.enabled = unit;
  return s;
}

}  // namespace

TEST(ParameterRoles, GptLlamaMlpMatchTheirNames) {
  for (bool unit : {false, true})
    for (const char* kind : {"gpt", "llama", "mlp"}) check(kind, small(unit));
}

TEST(ParameterRoles, GptDeclaresItsScalePropagationLinks) {
  auto model = nn::find_model_kind("gpt")->make(small(false));
  for (const autograd::Parameter* p : model->parameters()) {
    const std::string& n = p->name;
    std::string in;  // the name of the parameter feeding this matmul weight, per GPT-2's block
    if (ends_with(n, "attn.c_attn.weight")) in = n.substr(0, n.size() - 18) + "ln_1.weight";
    else if (ends_with(n, "mlp.c_fc.weight")) in = n.substr(0, n.size() - 15) + "ln_2.weight";
    else if (ends_with(n, "attn.c_proj.weight")) in = n.substr(0, n.size() - 18) + "attn.c_attn.weight";
    else if (ends_with(n, "mlp.c_proj.weight")) in = n.substr(0, n.size() - 17) + "mlp.c_fc.weight";
    else if (n == "transformer.wte.weight") in = "transformer.ln_f.weight";
    EXPECT_EQ(p->input ? p->input->name : std::string(), in) << n;
  }
}

TEST(ParameterRoles, UnknownKindsAndConfigs) {
  EXPECT_EQ(nn::find_model_kind("t5"), nullptr);
  EXPECT_EQ(nn::model_kind_names(), "gpt, llama, bert or mlp");
  EXPECT_EQ(nn::detect_model_kind("{\"model_type\": \"bert\"}"), "bert");
  EXPECT_EQ(nn::detect_model_kind("{\"foo\": 1}"), "");
  EXPECT_EQ(nn::detect_model_kind("not json"), "");
}
