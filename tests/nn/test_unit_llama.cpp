// The unit-scaled Llama: as for the unit GPT (test_unit_gpt.cpp), every scale
// either ties forward and backward (linear inputs, SiLU, attention, norms) or
// sits at a parameter leaf, the loss, the readout or a residual branch, so
//   unit_grad(p) = c_loss x c_readout x c_branch(p) x c_leaf(p) x d(sum of losses)/dp,
// checked against central finite differences of the model's own forward.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/llama.hpp"
#include "mantissa/unit/rules.hpp"
#include "nn/scaled_grad_check.hpp"

using namespace mantissa;
namespace us = mantissa::unit;

TEST(UnitLlama, GradientsAreScaledLossGradients) {
  kernels::set_num_threads(1);  // tiny tensors: threads only add synchronisation
  for (const char* set : {"library", "paper"}) {
    SCOPED_TRACE(set);
    nn::LlamaConfig cfg;
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
    const us::Rules lin = cfg.unit.rules("linear");
    const us::Scales silu = us::silu(1.0, cfg.unit.rules("silu"));
    ASSERT_DOUBLE_EQ(silu.fwd, silu.bwd[0]);
    const us::LossScales ce = us::cross_entropy(V, N);
    const us::Scales ro = us::linear_readout(C, V, N, cfg.unit.rules("readout"));
    const double c_loss = ce.bwd[0] / ce.input_fwd, c_ro = ro.bwd[0] / ro.fwd;
    auto factor = [&](const autograd::Parameter& p) -> double {
      if (p.name == "lm_head.weight") return c_loss * ro.bwd[1] / ro.fwd;
      double leaf = 1;
      const bool attn = p.name.find(".self_attn.") != std::string::npos || p.name.find(".input_layernorm") != std::string::npos;
      const bool mlp = p.name.find(".mlp.") != std::string::npos || p.name.find(".post_attention") != std::string::npos;
      if (p.name == "model.embed_tokens.weight") leaf = us::embedding(V, N).bwd[0];
      else if (p.value.ndim() == 1) leaf = us::rms_norm(C, N * C).bwd[1];
      else {
        const int64_t in = p.value.dim(1);
        int64_t fused = p.value.dim(0);
        if (p.name.find("q_proj") != std::string::npos || p.name.find("k_proj") != std::string::npos ||
            p.name.find("v_proj") != std::string::npos)
          fused = 3 * C;
        if (p.name.find("gate_proj") != std::string::npos || p.name.find("up_proj") != std::string::npos) fused = 2 * F;
        const us::Scales s = us::linear(in, fused, N, lin);
        EXPECT_DOUBLE_EQ(s.fwd, s.bwd[0]);
        leaf = s.bwd[1] / s.fwd;
      }
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
