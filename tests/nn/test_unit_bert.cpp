// The unit-scaled BERT: as for the unit GPT and Llama, every scale either ties forward and
// backward (linear inputs, GELU, attention, norms, residual split/add) or sits at a parameter
// leaf, the loss, the readout, a residual branch or the gather of the predicted rows, so
//   unit_grad(p) = c_loss x c_readout x c_gather x c_branch(p) x c_leaf(p) x d(sum of losses)/dp,
// checked against central finite differences of the model's own forward, post- and pre-norm,
// on padded rows. (The tied word table sums two such terms of different factors: left out.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/bert.hpp"
#include "mantissa/unit/rules.hpp"
#include "nn/scaled_grad_check.hpp"

using namespace mantissa;
namespace us = mantissa::unit;

namespace {
bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST(UnitBert, GradientsAreScaledLossGradients) {
  kernels::set_num_threads(1);
  for (const char* set : {"library", "paper"})
    for (bool pre : {false, true}) {
      SCOPED_TRACE(std::string(set) + (pre ? " pre-norm" : " post-norm"));
      nn::BertConfig cfg;
      cfg.byte_vocab = 12;
      cfg.context = 8;
      cfg.layers = 2;
      cfg.d_model = 8;
      cfg.heads = 2;
      cfg.hidden = 12;
      cfg.pre_norm = pre;
      cfg.seed = 11;
      cfg.unit.enabled = true;
      cfg.unit.rule_set = set;
      nn::Bert m(cfg);
      const int64_t B = 2, T = 8, C = cfg.d_model, V = cfg.vocab(), F = cfg.hidden;
      const int32_t cls = cfg.cls_id(), sep = cfg.sep_id(), mask = cfg.mask_id(), pad = cfg.pad_id();
      const int32_t ids[B * T] = {cls, 3, mask, 5, sep, 7, 1, sep,  //
                                  cls, 2, 9, mask, sep, pad, pad, pad};
      const int32_t tgt[B * T] = {-1, -1, 4, 5, -1, 2, -1, -1,  //
                                  -1, 6, -1, 0, -1, -1, -1, -1};
      nn::Batch batch{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
      std::copy(ids, ids + B * T, batch.inputs.data<int32_t>());
      std::copy(tgt, tgt + B * T, batch.targets.data<int32_t>());
      const int64_t R = 5, tokens = 13;
      // The random initialisation of the token-type table is zero in the unit model: give it values.
      std::mt19937_64 g(3);
      autograd::Parameter* types = m.find("bert.embeddings.token_type_embeddings.weight");
      for (int64_t i = 0; i < types->value.numel(); ++i) types->value.f32()[i] = static_cast<float>(g() % 1000) / 500.0f - 1.0f;

      const us::Rules head_lin = cfg.unit.rules("linear"), lin = cfg.unit.branch_linear_rules();
      const us::LossScales ce = us::cross_entropy(V, R);
      const us::Scales ro = us::linear_readout(C, V, R, cfg.unit.rules("readout"));
      const double c_loss = ce.bwd[0] / ce.input_fwd, c_ro = ro.bwd[0] / ro.fwd;
      const double c_gather = std::sqrt(static_cast<double>(tokens) / static_cast<double>(R));
      const double embed_fwd = 1.0 / std::sqrt(3.0);
      auto leaf_of = [&](const autograd::Parameter& p, const us::Scales& s) { return has(p.name, ".bias") ? s.bwd[1] : s.bwd[1] / s.fwd; };
      auto linear_leaf = [&](const autograd::Parameter& p, int64_t in, int64_t fused, int64_t batch_rows) {
        const us::Scales s = us::linear(in, fused, batch_rows, head_lin);
        EXPECT_DOUBLE_EQ(s.fwd, s.bwd[0]);
        return leaf_of(p, s);
      };
      // Linears inside the branches are unconstrained; a parameter's gradient carries the
      // mismatch (bwd / fwd) of every op between it and the branch's output.
      const us::Scales qkv_s = us::linear(C, 3 * C, tokens, lin), o_s = us::linear(C, C, tokens, lin);
      const us::Scales fc_s = us::linear(C, F, tokens, lin), out_s = us::linear(F, C, tokens, lin);
      const double after_qkv = us::mismatch(o_s);
      const double after_fc = us::mismatch(us::gelu(1.0, cfg.unit.rules("gelu"))) * us::mismatch(out_s);
      auto factor = [&](const autograd::Parameter& p) -> double {
        const std::string& n = p.name;
        if (n == "cls.predictions.bias") return c_loss * ro.bwd[1];
        if (has(n, "cls.predictions.transform.dense")) return c_loss * c_ro * linear_leaf(p, C, C, R);
        if (has(n, "cls.predictions.transform.LayerNorm"))
          return c_loss * c_ro * us::layer_norm(C, R * C).bwd[has(n, ".bias") ? 2 : 1];
        double leaf = 1, branch = 1;
        if (has(n, "position_embeddings")) leaf = us::embedding(cfg.context, tokens).bwd[0] / embed_fwd;
        else if (has(n, "token_type_embeddings")) leaf = us::embedding(cfg.type_vocab, tokens).bwd[0] / embed_fwd;
        else if (has(n, "LayerNorm")) {
          leaf = us::layer_norm(C, tokens * C).bwd[has(n, ".bias") ? 2 : 1];
          if (pre && has(n, "attention.output.LayerNorm")) leaf *= us::mismatch(qkv_s) * after_qkv;
          else if (pre && has(n, ".output.LayerNorm")) leaf *= us::mismatch(fc_s) * after_fc;
        } else if (has(n, "attention.self.")) leaf = leaf_of(p, qkv_s) * after_qkv;
        else if (has(n, "attention.output.dense")) leaf = leaf_of(p, o_s);
        else if (has(n, "intermediate.dense")) leaf = leaf_of(p, fc_s) * after_fc;
        else if (has(n, "output.dense")) leaf = leaf_of(p, out_s);
        const bool attn = has(n, "attention.self.") || has(n, "attention.output.dense") ||
                          (pre && has(n, "attention.output.LayerNorm"));
        const bool mlp = has(n, "intermediate.dense") || has(n, ".output.dense") || (pre && has(n, ".output.LayerNorm"));
        if (attn) branch = 1.0 / us::residual(cfg.unit.tau_attn).branch;
        else if (mlp) branch = 1.0 / us::residual(cfg.unit.tau_mlp).branch;
        return c_loss * c_ro * c_gather * branch * leaf;
      };
      m.zero_grad();
      m.forward_backward(batch, 1.0f / static_cast<float>(R));
      std::mt19937_64 pick(5);
      int checked = 0;
      for (autograd::Parameter* p : m.parameters()) {
        if (p->name == "bert.embeddings.word_embeddings.weight") continue;
        if (has(p->name, "attention.self.key.bias")) continue;  // zero gradient: the softmax ignores it
        SCOPED_TRACE(p->name);
        checked += unit_test::check_scaled_gradient(m, batch, *p, factor(*p), pick);
      }
      EXPECT_GT(checked, 40);
    }
}
