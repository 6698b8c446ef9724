// The `propagate` quantiser on the Llama (RMS norm, rotary, grouped kv heads,
// SwiGLU) and on BERT (post- and pre-norm, key-padded attention, biases): every
// product's operand scale equals the one the propagation rules give from the
// parameters, computed here independently on exponents, and only the residual
// gradients after a norm's backward and the head are rescaled dynamically
// (2 per layer, plus 1 for the Llama's head and 2 for BERT's dense + decoder).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <map>
#include <string>

#include "mantissa/nn/bert.hpp"
#include "mantissa/nn/llama.hpp"
#include "mantissa/scalify/scalify_quantiser.hpp"

using namespace mantissa;
using scalify::ScalifyOptions;
using scalify::ScalifyQuantiser;

namespace {

constexpr int kZero = -1000;  // the exponent of an all-zero parameter ("any scale")

// floor(log2 rms) of a parameter, computed here.
int log2_scale(nn::Model& m, const std::string& name) {
  const autograd::Parameter* p = m.find(name);
  if (!p) {
    ADD_FAILURE() << "no parameter " << name;
    return 0;
  }
  double ss = 0;
  for (int64_t i = 0; i < p->value.numel(); ++i) ss += static_cast<double>(p->value.f32()[i]) * p->value.f32()[i];
  if (ss == 0) return kZero;
  return static_cast<int>(std::floor(std::log2(std::sqrt(ss / static_cast<double>(p->value.numel())))));
}

// The add rule on exponents: floor(log2 sqrt(2^2a + 2^2b)).
int join(int a, int b) {
  if (a == kZero) return b;
  if (b == kZero) return a;
  return static_cast<int>(std::floor(0.5 * std::log2(std::ldexp(1.0, 2 * a) + std::ldexp(1.0, 2 * b))));
}

int root(int64_t k) { return static_cast<int>(std::floor(std::log2(std::sqrt(static_cast<double>(k))))); }

// Gains away from 1 and biases away from 0, so that every term of the rules matters.
void perturb(nn::Model& m) {
  for (autograd::Parameter* p : m.parameters()) {
    float* v = p->value.f32();
    for (int64_t i = 0; i < p->value.numel(); ++i) {
      const float w = std::sin(static_cast<float>(i) + static_cast<float>(p->value.numel()));
      if (p->role == autograd::Role::norm_gain) v[i] = 2.5f + 0.3f * w;
      if (p->role == autograd::Role::bias || p->role == autograd::Role::norm_bias) v[i] = 0.3f * w;
    }
    ++p->version;
  }
}

std::shared_ptr<ScalifyQuantiser> install(nn::Model& m) {
  auto q = std::make_shared<ScalifyQuantiser>(ScalifyOptions{}, m.parameters());
  autograd::PrecisionPolicy pol;
  pol.quantiser = q;
  m.set_precision(pol);
  return q;
}

TEST(ScalifyModels, LlamaScalesComeFromRmsNormAttentionAndSwigluRules) {
  omp_set_num_threads(1);
  nn::LlamaConfig c;
  c.vocab = 32, c.context = 16, c.layers = 2, c.d_model = 32, c.heads = 4, c.kv_heads = 1, c.seed = 3;
  nn::Llama m(c);
  perturb(m);
  auto q = install(m);
  const int64_t B = 4, T = 16;
  nn::Batch b{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
  for (int64_t i = 0; i < B * T; ++i) b.inputs.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + 3) % 32), b.targets.data<int32_t>()[i] = static_cast<int32_t>((i * 5 + 1) % 32);
  m.zero_grad();
  m.forward_backward(b, 1.0f / 64);
  q->end_step();
  const auto e = q->last_exponents();
  const int rC = root(32), rG = root(4);  // 4 query heads share the one kv head
  auto W = [&](const std::string& n) { return log2_scale(m, n + ".weight"); };
  for (int l = 0; l < 2; ++l) {
    SCOPED_TRACE(l);
    const std::string h = "model.layers." + std::to_string(l) + ".", a = h + "self_attn.", f = h + "mlp.";
    const int ln1 = W(h + "input_layernorm"), ln2 = W(h + "post_attention_layernorm");
    for (const char* p : {"q_proj", "k_proj", "v_proj"}) EXPECT_EQ(e.at("activation:" + a + p + ".weight"), ln1) << p;
    const int sq = ln1 + W(a + "q_proj") + rC, sk = ln1 + W(a + "k_proj") + rC, sv = ln1 + W(a + "v_proj") + rC;
    EXPECT_EQ(e.at("activation:" + a + "o_proj.weight"), sv);  // attention keeps v's scale
    EXPECT_EQ(e.at("activation:" + f + "gate_proj.weight"), ln2);
    EXPECT_EQ(e.at("activation:" + f + "up_proj.weight"), ln2);
    const int sg = ln2 + W(f + "gate_proj") + rC, su = ln2 + W(f + "up_proj") + rC;
    EXPECT_EQ(e.at("activation:" + f + "down_proj.weight"), sg + su);  // silu(g) u
    const int go = e.at("grad_output:" + a + "o_proj.weight") + W(a + "o_proj") + rC;
    EXPECT_EQ(e.at("grad_output:" + a + "v_proj.weight"), go + rG);
    EXPECT_EQ(e.at("grad_output:" + a + "q_proj.weight"), go + sv + sk);
    EXPECT_EQ(e.at("grad_output:" + a + "k_proj.weight"), go + sv + sq + rG);
    const int gd = e.at("grad_output:" + f + "down_proj.weight") + W(f + "down_proj") + rC;
    EXPECT_EQ(e.at("grad_output:" + f + "up_proj.weight"), gd + sg);
    EXPECT_EQ(e.at("grad_output:" + f + "gate_proj.weight"), gd + su);
  }
  EXPECT_EQ(e.at("activation:lm_head.weight"), W("model.norm"));
  const auto st = q->stats();
  EXPECT_EQ(st.layers, 2);
  EXPECT_EQ(st.last_step_rescales, 2 * 2 + 1);  // o_proj's and down_proj's residual gradients + the head
  EXPECT_EQ(st.saturated_values, 0);
}

TEST(ScalifyModels, BertScalesComeFromLayerNormAndKeyPaddedAttentionRules) {
  omp_set_num_threads(1);
  for (const bool pre : {false, true}) {
    SCOPED_TRACE(pre ? "pre-norm" : "post-norm");
    nn::BertConfig c;
    c.byte_vocab = 28, c.context = 16, c.layers = 2, c.d_model = 32, c.heads = 4, c.pre_norm = pre, c.seed = 3;
    nn::Bert m(c);
    perturb(m);
    auto q = install(m);
    const int64_t B = 3, T = 12, lens[] = {12, 7, 4};
    nn::Batch b{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
    for (int64_t r = 0; r < B; ++r)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t i = r * T + t;
        int32_t id = static_cast<int32_t>((i * 5 + 2) % 28);
        if (t == 0) id = c.cls_id();
        else if (t == lens[r] - 1) id = c.sep_id();
        else if (t >= lens[r]) id = c.pad_id();
        b.inputs.data<int32_t>()[i] = id;
        b.targets.data<int32_t>()[i] = t > 0 && t < lens[r] - 1 && t % 3 == 1 ? static_cast<int32_t>(i % 28) : -1;
      }
    m.zero_grad();
    m.forward_backward(b, 1.0f / 8);
    q->end_step();
    const auto e = q->last_exponents();
    const int rC = root(32);
    auto W = [&](const std::string& n) { return log2_scale(m, n + ".weight"); };
    auto ln = [&](const std::string& n) { return join(W(n), log2_scale(m, n + ".bias")); };
    auto out = [&](const std::string& n, int in) { return join(in + W(n) + rC, log2_scale(m, n + ".bias")); };
    for (int l = 0; l < 2; ++l) {
      SCOPED_TRACE(l);
      const std::string h = "bert.encoder.layer." + std::to_string(l) + ".", a = h + "attention.";
      const int attn_in = pre       ? ln(a + "output.LayerNorm")
                          : l == 0 ? ln("bert.embeddings.LayerNorm")
                                   : ln("bert.encoder.layer." + std::to_string(l - 1) + ".output.LayerNorm");
      for (const char* p : {"query", "key", "value"}) EXPECT_EQ(e.at("activation:" + a + "self." + p + ".weight"), attn_in) << p;
      const int sq = out(a + "self.query", attn_in), sk = out(a + "self.key", attn_in), sv = out(a + "self.value", attn_in);
      EXPECT_EQ(e.at("activation:" + a + "output.dense.weight"), sv);
      const int fc_in = pre ? ln(h + "output.LayerNorm") : ln(a + "output.LayerNorm");
      EXPECT_EQ(e.at("activation:" + h + "intermediate.dense.weight"), fc_in);
      EXPECT_EQ(e.at("activation:" + h + "output.dense.weight"), out(h + "intermediate.dense", fc_in));  // GELU keeps it
      const int go = e.at("grad_output:" + a + "output.dense.weight") + W(a + "output.dense") + rC;
      EXPECT_EQ(e.at("grad_output:" + a + "self.value.weight"), go);
      EXPECT_EQ(e.at("grad_output:" + a + "self.query.weight"), go + sv + sk);
      EXPECT_EQ(e.at("grad_output:" + a + "self.key.weight"), go + sv + sq);
      EXPECT_EQ(e.at("grad_output:" + h + "intermediate.dense.weight"),
                e.at("grad_output:" + h + "output.dense.weight") + W(h + "output.dense") + rC);
    }
    EXPECT_EQ(e.at("activation:cls.predictions.transform.dense.weight"),
              pre ? ln("bert.encoder.LayerNorm") : ln("bert.encoder.layer.1.output.LayerNorm"));
    EXPECT_EQ(e.at("activation:bert.embeddings.word_embeddings.weight"), ln("cls.predictions.transform.LayerNorm"));
    const auto st = q->stats();
    EXPECT_EQ(st.last_step_rescales, 2 * 2 + 2);  // two residual gradients per layer + the head's two products
    EXPECT_EQ(st.saturated_values, 0);
  }
}

}  // namespace
