// Precision policy and scale hooks consulted by every op, so that recipes
// (issue 4) and scaling rules (unit scaling, scale propagation) wrap ops
// without rewriting the models.
#pragma once

#include "mantissa/tensor/tensor.hpp"

namespace mantissa::autograd {

// Op classes as in the mixed-precision literature: matrix products in
// `matmul` (fp32 accumulation always), activations kept for the backward pass
// stored as `saved`; norms, softmax, losses and reductions always in fp32.
struct PrecisionPolicy {
  DType matmul = DType::f32;  // f32 or bf16 (FP8 operands are widened to bf16 by the caller)
  DType saved = DType::f32;   // f32, bf16 or f16
};

// Unit-scaling style multipliers of one op: the forward output is multiplied
// by `forward`, every input gradient by `backward` (and the weight gradient by
// `weight` for ops with weights). The default leaves the op unscaled.
struct OpScales {
  float forward = 1.0f;
  float backward = 1.0f;
  float weight = 1.0f;
};

}  // namespace mantissa::autograd
