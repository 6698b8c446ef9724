#include "nn/causal_lm.hpp"

#include <stdexcept>
#include <string>

#include "mantissa/unit/ops.hpp"
#include "mantissa/tensor/memory_trace.hpp"

namespace mantissa::nn::lm {
namespace ag = mantissa::autograd;

void check_batch(const Batch& batch, int64_t context, const char* model) {
  const Tensor& in = batch.inputs;
  const std::string m(model);
  if (!in.defined() || in.dtype() != DType::i32 || in.ndim() != 2) throw std::invalid_argument(m + ": inputs must be i32 [B, T]");
  if (in.dim(1) > context)
    throw std::invalid_argument(m + ": sequence length " + std::to_string(in.dim(1)) + " exceeds the context of " +
                                std::to_string(context));
  if (!batch.targets.defined() || batch.targets.dtype() != DType::i32 || batch.targets.shape() != in.shape())
    throw std::invalid_argument(m + ": targets must be i32 with the inputs' shape " + shape_str(in.shape()));
}

ag::Var loss(ag::Tape& t, const ag::Var& logits, const Tensor& targets, const unit::UnitConfig& unit, ag::LossStats* stats) {
  MemoryLabel label("loss");
  if (!unit.enabled) return ag::cross_entropy(t, logits, targets, stats);
  const int64_t V = logits.dim(-1), rows = logits.numel() / V;
  return unit::unit_cross_entropy(t, logits, targets, unit::cross_entropy(V, rows, unit.loss_mult), stats);
}

LossSum forward_backward(ag::Tape& t, const Logits& logits, const Tensor& targets, const unit::UnitConfig& unit,
                         float grad_scale) {
  ag::LossStats stats;
  ag::Var l;
  {
    ag::Var z = logits(t);
    l = loss(t, z, targets, unit, &stats);
  }  // the logits (and every other forward value not saved by an op) are gone here
  t.backward(l, unit.enabled ? grad_scale * static_cast<float>(stats.count) : grad_scale);
  return {stats.sum, stats.count};
}

LossSum evaluate(ag::Tape& t, const Logits& logits, const Tensor& targets, const unit::UnitConfig& unit) {
  ag::LossStats stats;
  loss(t, logits(t), targets, unit, &stats);
  return {stats.sum, stats.count};
}

}  // namespace mantissa::nn::lm
