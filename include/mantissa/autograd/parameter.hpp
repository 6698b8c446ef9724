// A trainable tensor: the leaf the tape accumulates gradients into
// (Tape::param), the key of cached weight casts, and what optimizers update.
// Models (nn/) create and own them; autograd and everything above use them.
#pragma once

#include <cstdint>
#include <string>

#include "mantissa/tensor/tensor.hpp"

namespace mantissa::nn {

struct Parameter {
  std::string name;     // GPT: Hugging Face GPT-2 names, e.g. "transformer.h.0.attn.c_attn.weight"
  Tensor value;         // fp32 master copy (MemoryKind::parameter), shape as saved to safetensors
  Tensor grad;          // fp32, same shape (MemoryKind::gradient); accumulated by backward
  bool decay = true;    // weight decay applies (false for biases, norm gains, positions)
  int64_t fan_in = 1;   // for parametrisation-dependent learning-rate rules
  int version = 0;      // bumped by whoever changes `value`, so cached casts/packings refresh
                        // (the matmul kernels key packed weights by this Parameter's address:
                        // its owner calls kernels::forget_packed_operand(this) before destroying it)
};

}  // namespace mantissa::nn
