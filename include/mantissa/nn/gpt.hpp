// GPT with the GPT-2 layout (Radford et al. 2019; Hugging Face names): learned token and position
// embeddings, pre-LayerNorm blocks with causal multi-head attention and a 4x
// GELU MLP, final LayerNorm, output head tied to the token embedding.
// Post-norm (config.pre_norm false, GPT-1's layout): each block's ln_1
// follows the attention's residual add and ln_2 the MLP's, and there is no
// final LayerNorm (the last block already ends with one).
// Parameters carry the Hugging Face GPT-2 names and shapes (Conv1D [in, out]).
//
// Initialisation (GPT-2): one Rng(seed) draws, in parameter order, N(0, 0.02)
// for wte, wpe, c_attn and c_fc weights and N(0, 0.02/sqrt(2 layers)) for both
// c_proj weights; biases 0, LayerNorm gains 1 and shifts 0.
// Weight decay: off for biases, LayerNorm parameters and wpe; on for wte
// (it is also the output head's matrix, as in nanoGPT) and the Conv1D weights.
// Dropout (config.dropout) follows GPT-2's embd/resid dropout: after the
// embeddings and after each c_proj; attention probabilities are not dropped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/autograd/tape.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/unit/config.hpp"

namespace mantissa::autograd {
struct LossStats;
}

namespace mantissa::nn {

namespace lm {
struct Forward;  // src/nn/causal_lm.hpp
}

struct GPTConfig {
  int64_t vocab = 256;
  int64_t context = 128;  // n_positions
  int64_t layers = 4;
  int64_t d_model = 256;
  int64_t heads = 4;
  float dropout = 0.0f;
  // attn_pdrop of a Hugging Face config: dropout of the attention
  // probabilities, which mantissa does not implement. Evaluation does not
  // apply it; training refuses a model where it is not 0 (forward_backward
  // throws; train --dropout P rewrites it to 0 with the other rates P).
  float attn_dropout = 0.0f;
  bool pre_norm = true;  // false: post-norm blocks, no ln_f
  uint64_t seed = 0;
  // Unit-scaled parametrisation: weights N(0,1), per-op scales,
  // residual_split/add with tau, u-muP attention, untied unit readout
  // "lm_head.weight" [V, C] and unit cross-entropy. See unit/config.hpp.
  unit::UnitConfig unit;

  void validate() const;  // throws std::invalid_argument naming the field
  std::string to_json() const;  // Hugging Face GPT2Config keys (+ "mantissa" extras)
  static GPTConfig from_json(const std::string& text);  // accepts to_json's output
};

class GPT : public Model {
 public:
  explicit GPT(const GPTConfig& config);
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  std::string base_prefix() const override { return "transformer."; }
  LossSum forward_backward(const Batch& batch, float grad_scale) override;
  std::string cannot_train() const override;
  void set_dropout(float p) override;  // residual and embedding p, attention 0
  LossSum evaluate(const Batch& batch) override;
  std::string config_json() const override { return config_.to_json(); }
  std::string kind() const override { return "gpt"; }
  int64_t context_length() const override { return config_.context; }
  int64_t blocks() const override { return config_.layers; }
  const unit::UnitConfig& unit() const override { return config_.unit; }
  const GPTConfig& config() const { return config_; }

  // logits [B, T, V] for ids i32 [B, T] on the given tape (records when grads are enabled).
  autograd::Var forward(autograd::Tape& tape, const Tensor& ids);
  // forward's two parts: ids -> the final hidden state [N, C], and the head
  // [rows, C] -> logits [rows, V] (N: the batch's rows), for lm::forward_backward.
  autograd::Var hidden(autograd::Tape& tape, const Tensor& ids);
  autograd::Var head(autograd::Tape& tape, const autograd::Var& x, int64_t N);
  lm::Forward parts(const Tensor& ids);
  // logits [B, T, V] without recording anything.
  Tensor logits(const Tensor& ids) override;
  // Number of training passes so far: the dropout stream position, part of a
  // resumable checkpoint (restore it so that a resumed run drops the same units).
  uint64_t dropout_passes() const { return passes_; }
  void set_dropout_passes(uint64_t n) { passes_ = n; }

 private:
  struct Block {
    autograd::Parameter *ln1_w, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b;
    autograd::Parameter *ln2_w, *ln2_b, *fc_w, *fc_b, *mlp_proj_w, *mlp_proj_b;
  };
  uint64_t pass_seed(bool training) override;
  // One block, standard or unit-scaled, pre- or post-norm (gpt_forward.cpp).
  autograd::Var block(autograd::Tape& tape, const Block& b, autograd::Var x, size_t layer);
  // Layer norm with the gain and shift w, b (unit: scaled; u-muP: w, b null, the constants).
  autograd::Var norm(autograd::Tape& tape, const autograd::Var& x, autograd::Parameter* w, autograd::Parameter* b);
  // Dropout with config.dropout (unit: x sqrt(1-p) on both passes).
  autograd::Var dropout(autograd::Tape& tape, autograd::Var x);
  // Residual taus of block `layer`: (attention, MLP).
  std::pair<double, double> residual_taus(size_t layer) const;
  void check_batch(const Batch& batch) const;

  GPTConfig config_;
  autograd::Parameter *wte_ = nullptr, *wpe_ = nullptr, *lnf_w_ = nullptr, *lnf_b_ = nullptr;
  autograd::Parameter* lm_head_ = nullptr;  // unit only (the standard head is tied to wte)
  Tensor norm_gain_, norm_shift_;  // u-muP's non-parametric norms: constant 1 and 0 [C]
  std::vector<Block> blocks_;
  uint64_t passes_ = 0;  // dropout stream: one per training forward
};

}  // namespace mantissa::nn
