// A trainable tensor: the leaf the tape accumulates gradients into
// (Tape::param), the key of cached weight casts, and what optimizers update.
// Models (nn/) create and own them; autograd and everything above use them.
#pragma once

#include <cstdint>
#include <string>

#include "mantissa/tensor/tensor.hpp"

namespace mantissa::autograd {

// What a parameter is to the model that owns it. Every rule outside nn/
// (learning-rate multipliers, weight decay, master rounding, which casts
// apply, scale propagation) reads the role, never the name.
enum class Role {
  token_embedding,     // [V, C] token table (also the output head when tied)
  position_embedding,  // [T, C] learned positions
  weight,              // matrix of a hidden linear
  bias,                // vector added after a linear (the linear's Parameter::bias)
  norm_gain,           // LayerNorm / RMSNorm multiplier
  norm_bias,           // LayerNorm shift (the gain's Parameter::bias)
  readout,             // untied output head / classifier matrix
};
const char* role_name(Role r);
// LayerNorm / RMSNorm parameters (gains and shifts).
constexpr bool is_norm(Role r) { return r == Role::norm_gain || r == Role::norm_bias; }
// Weight decay applies to the matrices: embeddings of tokens, linears, readout.
constexpr bool decays(Role r) { return r == Role::token_embedding || r == Role::weight || r == Role::readout; }

struct Parameter {
  std::string name;     // GPT: Hugging Face GPT-2 names, e.g. "transformer.h.0.attn.c_attn.weight"
  Tensor value;         // fp32 master copy (MemoryKind::parameter), shape as saved to safetensors
  Tensor grad;          // fp32, same shape (MemoryKind::gradient); accumulated by backward
  Role role = Role::weight;
  bool decay = true;    // weight decay applies (decays(role) for the library's models)
  int64_t fan_in = 1;   // inputs per output of a linear / readout (embedding tables: their width)
  int block = -1;       // index of the residual block holding it; -1 outside the blocks
  Parameter* bias = nullptr;  // weight or norm gain: the shift added after it (null: none)
  // Scale propagation (scalify/scalify_quantiser.hpp) of a matmul weight's
  // input operand: the norm gain or linear weight whose output it is, and
  // the op in between. Null: not known from parameters (rescaled dynamically).
  //   pointwise  GELU / SiLU of `input`
  //   attention  softmax(q k^T) v with v = `input`'s output; q and k are the
  //              outputs of `query` and `key`, or (both null) slices of
  //              `input`'s output too (one fused qkv product)
  //   gated      SwiGLU silu(g) * u with u = `input`'s output, g = `gate`'s
  enum class Through : uint8_t { direct, pointwise, attention, gated };
  Parameter* input = nullptr;
  Through through = Through::direct;
  Parameter* query = nullptr;
  Parameter* key = nullptr;
  Parameter* gate = nullptr;
  int version = 0;      // bumped by whoever changes `value`, so values derived from it refresh
                        // (tensor/derived_cache.hpp keys them by this Parameter's address: its
                        // owner calls derived_cache().forget_source(this) before destroying it)
};

}  // namespace mantissa::autograd
