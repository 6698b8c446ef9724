// Llama-style decoder (Hugging Face LlamaForCausalLM layout): token embedding, pre-RMSNorm blocks
// of causal multi-head attention with rotary positions (optionally grouped
// kv heads) and a SwiGLU MLP, final RMSNorm, untied output head (tying as an
// option); no biases. Parameters carry the Hugging Face LlamaForCausalLM names
// and shapes (linear weights [out, in]).
//
// Initialisation: one Rng(seed) draws, in parameter order, N(0, 0.02) for
// every matrix (transformers' initializer_range), RMSNorm gains 1. Weight
// decay on the matrices, off for the gains.
//
// Unit-scaled (config.unit.enabled), from the same forward code: weights
// N(0, 1), embedding backward sqrt(V/tokens), residual_split/add with
// tau_attn/tau_mlp, RMSNorm weight gradient scaled, linears by
// unit::linear, u-muP attention, SwiGLU as a unit SiLU times the up
// projection (the product of two independent unit tensors is unit), a unit
// readout and the unit cross-entropy. Tying is not offered there.
//
// Smooth-SwiGLU (Fishman et al. 2025): the SwiGLU product h [N, F] is
// multiplied per channel by s = 2^-round(log2 amax_c) (amax over the batch,
// no gradient) before the down projection, whose weight's input channels are
// multiplied by 1/s: exact in real arithmetic, and the down projection's
// operand cast sees channels of equal range.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
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

class Rng;

struct LlamaConfig {
  int64_t vocab = 256;
  int64_t context = 128;  // max_position_embeddings
  int64_t layers = 4;
  int64_t d_model = 256;
  int64_t heads = 4;
  int64_t kv_heads = 0;  // 0: = heads (no grouping)
  int64_t hidden = 0;    // SwiGLU width; 0: the multiple of 64 nearest 8/3 d_model
  double rms_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_embeddings = false;
  bool smooth_swiglu = false;
  uint64_t seed = 0;
  unit::UnitConfig unit;

  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t ffn() const;  // hidden, or its default
  void validate() const;  // throws std::invalid_argument naming the field
  std::string to_json() const;  // transformers LlamaConfig keys (+ "mantissa" extras)
  static LlamaConfig from_json(const std::string& text);
};

class Llama : public Model {
 public:
  explicit Llama(const LlamaConfig& config);
  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  std::string base_prefix() const override { return "model."; }
  LossSum forward_backward(const Batch& batch, float grad_scale) override;
  LossSum evaluate(const Batch& batch) override;
  std::string config_json() const override { return config_.to_json(); }
  std::string kind() const override { return "llama"; }
  int64_t context_length() const override { return config_.context; }
  int64_t blocks() const override { return config_.layers; }
  const unit::UnitConfig& unit() const override { return config_.unit; }
  const LlamaConfig& config() const { return config_; }

  // logits [B, T, V] for ids i32 [B, T] on the given tape.
  autograd::Var forward(autograd::Tape& tape, const Tensor& ids);
  // forward's two parts: ids -> the final hidden state [N, C], and the head
  // [rows, C] -> logits [rows, V] (N: the batch's rows), for lm::forward_backward.
  autograd::Var hidden(autograd::Tape& tape, const Tensor& ids);
  autograd::Var head(autograd::Tape& tape, const autograd::Var& x, int64_t N);
  lm::Forward parts(const Tensor& ids);
  // logits [B, T, V] without recording anything.
  Tensor logits(const Tensor& ids) override;

 private:
  struct Block {
    autograd::Parameter *ln1, *q, *k, *v, *o, *ln2, *gate, *up, *down;
  };
  // N(0, std^2) from rng, or all ones when std is 0 (norm gains).
  autograd::Parameter* add(std::string name, const Shape& shape, autograd::Role role, int64_t fan_in, int block, double std, Rng& rng);
  autograd::Var block(autograd::Tape& t, const Block& b, autograd::Var x, size_t layer);

  LlamaConfig config_;
  autograd::Parameter *embed_ = nullptr, *norm_ = nullptr, *head_ = nullptr;  // head_ = embed_ when tied
  std::vector<Block> blocks_;
};

}  // namespace mantissa::nn
