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

using Logits = std::function<autograd::Var(autograd::Tape&)>;
// Forward, loss and backward of one micro-batch on t (see Model::forward_backward).
// Unit scaling: the logit gradient is unit per row whatever the batch (the
// mean is a forward-only 1/rows), so this micro-batch's share of the step,
// count/total, is the seed; grad_scale = loss_scale/total carries 1/total.
LossSum forward_backward(autograd::Tape& t, const Logits& logits, const Tensor& targets, const unit::UnitConfig& unit,
                         float grad_scale);
// Forward and loss only, nothing recorded.
LossSum evaluate(autograd::Tape& t, const Logits& logits, const Tensor& targets, const unit::UnitConfig& unit);

}  // namespace mantissa::nn::lm
