// Bidirectional attention over right-padded sequences.
#include "mantissa/autograd/ops_padded_attention.hpp"

#include <stdexcept>
#include <string>

#include "mantissa/kernels/kernels.hpp"

namespace mantissa::autograd {

// qkv [B, T, 3C] -> out [B, T, C]; probabilities att [B, NH, T, T] kept for backward
// (or, from kernels::attention_prefers_blockwise, only their row log-sum-exp).
Var key_padded_self_attention(Tape& t, const Var& qkv, int64_t heads, const Tensor& key_len) {
  if (qkv.value.ndim() != 3 || qkv.dim(2) % 3 != 0)
    throw std::invalid_argument("key_padded_self_attention: qkv must be [B, T, 3C], got " + shape_str(qkv.shape()));
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  if (heads <= 0 || C % heads != 0)
    throw std::invalid_argument("key_padded_self_attention: " + std::to_string(C) + " channels do not split into " +
                                std::to_string(heads) + " heads");
  if (!key_len.defined() || key_len.dtype() != DType::i32 || key_len.ndim() != 1 || key_len.dim(0) != B)
    throw std::invalid_argument("key_padded_self_attention: key lengths must be i32 [" + std::to_string(B) + "]");
  const bool bf16 = t.policy().matmul == DType::bf16;
  Tensor y = Tensor::empty({B, T, C});
  const Tensor len = key_len.clone();
  if (kernels::attention_prefers_blockwise(B, T, heads, bf16, false)) {
    // Long sequences: only the per-row log-sum-exp [B, NH, T] is kept; backward recomputes the probabilities.
    Tensor lse = Tensor::empty({B, heads, T}, DType::f32, MemoryKind::activation);
    kernels::attention_forward_keys_blockwise(y.f32(), lse.f32(), qkv.value.f32(), len.data<int32_t>(), B, T, C,
                                              heads, bf16);
    const bool record = t.wants_grad({&qkv});
    Var out = Tape::result(std::move(y), record);
    if (record)
      t.record([=, qs = t.save_compact(qkv.value), qn = qkv.node, on = out.node]() {
        if (!on->has_grad()) return;
        kernels::attention_backward_keys_blockwise(qn->buffer().f32(), on->grad.f32(), Tape::restore(qs).f32(),
                                                   lse.f32(), len.data<int32_t>(), B, T, C, heads, bf16);
      });
    return out;
  }
  Tensor att = Tensor::empty({B, heads, T, T}, DType::f32, MemoryKind::activation);
  kernels::attention_forward_keys(y.f32(), att.f32(), qkv.value.f32(), len.data<int32_t>(), B, T, C, heads, bf16);
  const bool record = t.wants_grad({&qkv});
  Var out = Tape::result(std::move(y), record);
  if (record)
    t.record([=, qs = t.save_compact(qkv.value), as = t.save_compact(att), qn = qkv.node, on = out.node]() {
      if (!on->has_grad()) return;
      Tensor datt = Tensor::empty({B, heads, T, T}, DType::f32, MemoryKind::workspace);
      kernels::attention_backward_keys(qn->buffer().f32(), datt.f32(), on->grad.f32(), Tape::restore(qs).f32(),
                                       Tape::restore(as).f32(), len.data<int32_t>(), B, T, C, heads, bf16);
    });
  return out;
}

}  // namespace mantissa::autograd
