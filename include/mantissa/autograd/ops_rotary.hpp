// Rotary position embedding with grouped-query heads, written into the
// attention's qkv layout (the Llama-style decoder's, nn/llama.hpp). Forward
// and backward side by side in src/autograd/ops_rotary.cpp.
#pragma once

#include <cstdint>

#include "mantissa/autograd/tape.hpp"

namespace mantissa::autograd {

// Rotary position embedding (transformers' rotate_half convention: within a
// head of size D, dimension i pairs with i + D/2, angle = pos theta^(-2i/D))
// applied to q [B, T, H*D] and k [B, T, KV*D], then k and v [B, T, KV*D]
// repeated to H heads (head h reads kv head h / (H/KV)), written as the
// qkv [B, T, 3 H*D] that causal_self_attention reads. Positions are 0..T-1.
// Backward: the inverse rotation, and the sum over the heads sharing a kv head.
Var rotary_qkv(Tape& t, const Var& q, const Var& k, const Var& v, int64_t heads, int64_t kv_heads, double theta);

}  // namespace mantissa::autograd
