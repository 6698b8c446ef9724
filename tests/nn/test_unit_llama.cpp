// The unit-scaled Llama: as for the unit GPT (test_unit_gpt.cpp), every scale
// either ties forward and backward (linear inputs, SiLU, attention, norms) or
// sits at a parameter leaf, the loss, the readout or a residual branch, so
//   unit_grad(p) = c_loss x c_readout x c_branch(p) x c_leaf(p) x d(sum of losses)/dp,
// checked against central finite differences of the model's own forward.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/llama.hpp"
#include "mantissa/unit/rules.hpp"
#include "nn/scaled_grad_check.hpp"

using namespace mantissa;
namespace us = mantissa::unit;

TEST(UnitLlama, GradientsAreScaledLossGradients) {
  kernels::set_num_threads(1);  // tiny tensors: threads only add synchronisation
  for (const char* set : {"library", "paper"})
    for (int64_t kv_heads : {0, 1}) {  // 0: one kv head per head; 1: two heads share it
    SCOPED_TRACE(std::string(set) + " kv_heads " + std::to_string(kv_heads));
    nn::LlamaConfig cfg;
    cfg.kv_heads = kv_heads;
    cfg.vocab = 16;
    cfg.context = 8;
    cfg.layers = 2;
    cfg.d_model = 8;
    cfg.heads = 2;
    cfg.hidden = 12;
    cfg.seed = 11;
    cfg.unit.enabled = true;
    cfg.unit.rule_set = set;
    nn::Llama m(cfg);
    const int64_t B = 2, T = 8, N = B * T, C = cfg.d_model, V = cfg.vocab, F = cfg.hidden;
    std::mt19937_64 g(3);
    nn::Batch batch{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
    int64_t count = 0;
    for (int64_t i = 0; i < N; ++i) {
      batch.inputs.data<int32_t>()[i] = static_cast<int32_t>(g() % V);
      batch.targets.data<int32_t>()[i] = i % 5 == 2 ? -1 : static_cast<int32_t>(g() % V);
      count += batch.targets.data<int32_t>()[i] >= 0;
    }
    // Linears inside the branches are unconstrained; a parameter's gradient carries the
    // mismatch (bwd / fwd) of every op between it and the branch's output.
    const us::Rules lin = cfg.unit.branch_linear_rules();
    const int64_t KC = cfg.kv() * (C / cfg.heads);
    const us::Scales qkv_s = us::linear(C, C + 2 * KC, N, lin), o_s = us::linear(C, C, N, lin);
    // Grouped heads: the kv head's gradient sums heads / kv ones; q, k and v all take its factor.
    const double kv_g = 1.0 / std::sqrt(static_cast<double>(cfg.heads / cfg.kv()));
    const us::Scales gate_s = us::linear(C, 2 * F, N, lin), down_s = us::linear(F, C, N, lin);
    const us::Scales glu = us::silu_glu(1.0, cfg.unit.rules("silu"));
    const double after_qkv = kv_g * us::mismatch(o_s), after_gate = us::mismatch(glu) * us::mismatch(down_s);
    const us::LossScales ce = us::cross_entropy(V, N);
    const us::Scales ro = us::linear_readout(C, V, N, cfg.unit.rules("readout"));
    const double c_loss = ce.bwd[0] / ce.input_fwd, c_ro = ro.bwd[0] / ro.fwd;
    auto has = [](const std::string& n, const char* part) { return n.find(part) != std::string::npos; };
    auto factor = [&](const autograd::Parameter& p) -> double {
      const std::string& n = p.name;
      if (n == "lm_head.weight") return c_loss * ro.bwd[1] / ro.fwd;
      double leaf = 1;
      const bool attn = has(n, ".self_attn.") || has(n, ".input_layernorm");
      const bool mlp = has(n, ".mlp.") || has(n, ".post_attention");
      if (n == "model.embed_tokens.weight") leaf = us::embedding(V, N).bwd[0];
      else if (has(n, ".input_layernorm")) leaf = us::rms_norm(C, N * C).bwd[1] * us::mismatch(qkv_s) * after_qkv;
      else if (has(n, ".post_attention")) leaf = us::rms_norm(C, N * C).bwd[1] * us::mismatch(gate_s) * after_gate;
      else if (p.value.ndim() == 1) leaf = us::rms_norm(C, N * C).bwd[1];
      else if (has(n, "q_proj") || has(n, "k_proj") || has(n, "v_proj")) leaf = qkv_s.bwd[1] / qkv_s.fwd * after_qkv;
      else if (has(n, "o_proj")) leaf = o_s.bwd[1] / o_s.fwd;
      else if (has(n, "gate_proj") || has(n, "up_proj")) leaf = gate_s.bwd[1] / gate_s.fwd * after_gate;
      else if (has(n, "down_proj")) leaf = down_s.bwd[1] / down_s.fwd;
      else ADD_FAILURE() << "no factor for " << n;
      double branch = 1;
      if (attn) branch = 1.0 / us::residual(cfg.unit.tau_attn).branch;
      if (mlp) branch = 1.0 / us::residual(cfg.unit.tau_mlp).branch;
      return c_loss * c_ro * branch * leaf;
    };
    m.zero_grad();
    m.forward_backward(batch, 1.0f / static_cast<float>(count));
    std::mt19937_64 pick(5);
    int checked = 0;
    for (autograd::Parameter* p : m.parameters()) {
      SCOPED_TRACE(p->name);
      checked += unit_test::check_scaled_gradient(m, batch, *p, factor(*p), pick);
    }
    EXPECT_EQ(checked, 2 * static_cast<int>(m.parameters().size()));
  }
}
