// Bidirectional multi-head attention over right-padded sequences (the BERT
// encoder's, nn/bert.hpp; the causal one is in ops.hpp). Forward and backward
// side by side in src/autograd/ops_padded_attention.cpp.
#pragma once

#include <cstdint>

#include "mantissa/autograd/tape.hpp"

namespace mantissa::autograd {

// qkv [B, T, 3C] -> out [B, T, C], NH = heads, scores / sqrt(C/NH), no causal
// mask: every query of sequence b attends to keys 0..key_len[b]-1 (key_len
// i32 [B], each in [1, T]; the padded keys get probability 0). Queries in
// the padding are computed like any other (their outputs are not masked).
// Under a bf16 matmul policy the four products per pass take bf16 operands.
// Backward: dqkv += the exact gradient (probabilities kept in policy.saved).
Var key_padded_self_attention(Tape& t, const Var& qkv, int64_t heads, const Tensor& key_len);

}  // namespace mantissa::autograd
