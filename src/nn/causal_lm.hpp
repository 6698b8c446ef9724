// What the byte-level causal language models (GPT, Llama) share around their
// forward pass: batch checks, the (unit) cross-entropy and the backward seed.
#pragma once

#include <cstdint>
#include <functional>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/unit/config.hpp"

namespace mantissa::nn::lm {

// Throws std::invalid_argument naming `model` unless inputs are i32 [B, T]
// with T <= context and targets i32 of the same shape.
void check_batch(const Batch& batch, int64_t context, const char* model);

// Sum of per-target losses of logits [.., V] (unit: the unit cross-entropy, scaled backward).
autograd::Var loss(autograd::Tape& t, const autograd::Var& logits, const Tensor& targets, const unit::UnitConfig& unit,
                   autograd::LossStats* stats);

// A causal LM's forward in two parts: the final hidden state x [N, C] (N =
// B T rows, after the last norm) on a tape, and the head that maps rows of x
// [rows, C] to logits [rows, V] on a tape (the same one, or one per chunk).
struct Forward {
  std::function<autograd::Var(autograd::Tape&)> hidden;
  std::function<autograd::Var(autograd::Tape&, const autograd::Var& x)> head;
  int64_t vocab = 0;
};

// Forward, loss and backward of one micro-batch on t (see Model::forward_backward).
// Unit scaling: the logit gradient is unit per row whatever the batch (the
// mean is a forward-only 1/rows), so this micro-batch's share of the step,
// count/total, is the seed; grad_scale = loss_scale/total carries 1/total.
// When N x V exceeds logit_chunk_elements(), the logits never exist whole (as
// llm.c's fused classifier): the head, the loss and the head's backward run
// per chunk of rows on a tape of their own, whose gradient of x then seeds
// t's backward; with one chunk this is the same computation as without.
LossSum forward_backward(autograd::Tape& t, const Forward& f, const Tensor& targets, const unit::UnitConfig& unit,
                         float grad_scale);
// The same for a model that computes its logits [.., V] whole (BERT: only
// the predicted rows reach its head).
using Logits = std::function<autograd::Var(autograd::Tape&)>;
LossSum forward_backward(autograd::Tape& t, const Logits& logits, const Tensor& targets, const unit::UnitConfig& unit,
                         float grad_scale);
// Forward and loss only, nothing recorded (chunked as above).
LossSum evaluate(autograd::Tape& t, const Forward& f, const Tensor& targets, const unit::UnitConfig& unit);

}  // namespace mantissa::nn::lm
