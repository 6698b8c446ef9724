#include "nn/causal_lm.hpp"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "mantissa/nn/models.hpp"
#include "mantissa/unit/ops.hpp"
#include "mantissa/tensor/memory_trace.hpp"

namespace mantissa::nn {
namespace {
std::atomic<int64_t>& chunk_limit() {
  static std::atomic<int64_t> limit{int64_t{1} << 25};  // 128 MiB of fp32 logits
  return limit;
}
}  // namespace

int64_t logit_chunk_elements() { return chunk_limit().load(std::memory_order_relaxed); }

void set_logit_chunk_elements(int64_t n) {
  if (n < 1) throw std::invalid_argument("logit chunk: need at least one element, got " + std::to_string(n));
  chunk_limit().store(n, std::memory_order_relaxed);
}

}  // namespace mantissa::nn

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

namespace {

Shape with_vocab(Shape s, int64_t V) {
  s.push_back(V);
  return s;
}

int64_t rows_per_chunk(int64_t N, int64_t V) {
  const int64_t limit = logit_chunk_elements();
  if (N * V <= limit) return N;
  return std::max<int64_t>(1, limit / V);
}

// Targets of rows [r0, r1) of the flattened [N] targets.
Tensor target_rows(const Tensor& targets, int64_t r0, int64_t r1) {
  return targets.view({targets.numel()}).slice0(r0, r1);
}

// The counters later ops read from the context, after a chunk's tape ran.
void take_counters(ag::OpContext& into, const ag::OpContext& from) {
  into.dropout_calls = from.dropout_calls;
  into.quant_calls = from.quant_calls;
  into.save_calls = from.save_calls;
  into.copy_saves = from.copy_saves;
}

}  // namespace

LossSum forward_backward(ag::Tape& t, const Forward& f, const Tensor& targets, const unit::UnitConfig& unit,
                         float grad_scale) {
  ag::Var x = f.hidden(t);
  const int64_t N = x.dim(0), chunk = rows_per_chunk(N, f.vocab);
  if (chunk == N) {
    return forward_backward(
        t,
        [&](ag::Tape& tape) {
          ag::Var z = ag::reshape(tape, f.head(tape, x), with_vocab(targets.shape(), f.vocab));
          x = ag::Var();
          return z;
        },
        targets, unit, grad_scale);
  }
  int64_t count = 0;
  const int32_t* tg = targets.data<int32_t>();
  for (int64_t i = 0; i < targets.numel(); ++i) count += tg[i] >= 0 ? 1 : 0;
  const float seed = unit.enabled ? grad_scale * static_cast<float>(count) : grad_scale;
  Tensor dx = Tensor::empty(x.shape(), DType::f32, MemoryKind::activation);
  LossSum total;
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t r1 = std::min(N, r0 + chunk);
    ag::Tape sub(t.ctx());
    ag::Var xc = sub.leaf(x.value.slice0(r0, r1).clone(MemoryKind::activation));
    ag::LossStats stats;
    {
      ag::Var l = loss(sub, f.head(sub, xc), target_rows(targets, r0, r1), unit, &stats);
      sub.backward(l, seed);
    }
    take_counters(t.ctx(), sub.ctx());
    const int64_t C = x.dim(1);
    std::copy_n(xc.node->grad.f32(), (r1 - r0) * C, dx.f32() + r0 * C);
    total.sum += stats.sum;
    total.count += stats.count;
  }
  t.backward(x, dx);
  return total;
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

LossSum evaluate(ag::Tape& t, const Forward& f, const Tensor& targets, const unit::UnitConfig& unit) {
  ag::Var x = f.hidden(t);
  const int64_t N = x.dim(0), chunk = rows_per_chunk(N, f.vocab);
  if (chunk == N) {
    ag::LossStats stats;
    loss(t, ag::reshape(t, f.head(t, x), with_vocab(targets.shape(), f.vocab)), targets, unit, &stats);
    return {stats.sum, stats.count};
  }
  LossSum total;
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t r1 = std::min(N, r0 + chunk);
    ag::LossStats stats;
    loss(t, f.head(t, ag::Var{x.value.slice0(r0, r1), nullptr, nullptr}), target_rows(targets, r0, r1), unit, &stats);
    total.sum += stats.sum;
    total.count += stats.count;
  }
  return total;
}

}  // namespace mantissa::nn::lm
