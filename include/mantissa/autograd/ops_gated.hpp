// The gated feed-forward ops (the Llama-style decoder's MLP, nn/llama.hpp):
// the SwiGLU product and the per-channel scale Smooth-SwiGLU moves between
// its output and the down projection. Forward and backward side by side in
// src/autograd/ops_gated.cpp.
#pragma once

#include <cstdint>

#include "mantissa/autograd/tape.hpp"

namespace mantissa::autograd {

// y [..., F] = alpha silu(gate) * up; silu(g) = g sigmoid(g).
// Backward: dup += alpha silu(g) dy, dgate += beta silu'(g) up dy
// (alpha = beta = 1: the exact gradient; unit scaling passes the SiLU's
// forward and backward scales, unit::silu).
Var swiglu(Tape& t, const Var& gate, const Var& up, float alpha = 1.0f, float beta = 1.0f);

// y [..., C] = x [..., C] * s [C] per channel, s a constant (no gradient).
// Backward: dx += s dy.
Var scale_channels(Tape& t, const Var& x, const Tensor& s);

}  // namespace mantissa::autograd
