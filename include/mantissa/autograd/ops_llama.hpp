// Ops of the Llama-style decoder (nn/llama.hpp) beyond ops.hpp / unit/ops.hpp:
// the SwiGLU product, rotary position embedding with grouped-query heads
// merged into the attention's qkv layout, and a per-channel scale
// (Smooth-SwiGLU). Forward and backward side by side in src/autograd/ops_llama.cpp.
#pragma once

#include <cstdint>

#include "mantissa/autograd/tape.hpp"

namespace mantissa::autograd {

// y [..., F] = alpha silu(gate) * up; silu(g) = g sigmoid(g).
// Backward: dup += alpha silu(g) dy, dgate += beta silu'(g) up dy
// (alpha = beta = 1: the exact gradient; unit scaling passes the SiLU's
// forward and backward scales, unit::silu).
Var swiglu(Tape& t, const Var& gate, const Var& up, float alpha = 1.0f, float beta = 1.0f);

// Rotary position embedding (transformers' rotate_half convention: within a
// head of size D, dimension i pairs with i + D/2, angle = pos theta^(-2i/D))
// applied to q [B, T, H*D] and k [B, T, KV*D], then k and v [B, T, KV*D]
// repeated to H heads (head h reads kv head h / (H/KV)), written as the
// qkv [B, T, 3 H*D] that causal_self_attention reads. Positions are 0..T-1.
// Backward: the inverse rotation, and the sum over the heads sharing a kv head.
Var rotary_qkv(Tape& t, const Var& q, const Var& k, const Var& v, int64_t heads, int64_t kv_heads, double theta);

// y [..., C] = x [..., C] * s [C] per channel, s a constant (no gradient).
// Backward: dx += s dy.
Var scale_channels(Tape& t, const Var& x, const Tensor& s);

}  // namespace mantissa::autograd
