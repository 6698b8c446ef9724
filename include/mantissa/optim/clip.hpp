// Gradient-norm clipping (torch.nn.utils.clip_grad_norm_ semantics with
// error_if_nonfinite=False, but a non-finite norm leaves the grads untouched
// so the caller can skip the step instead of writing NaN into them).
#pragma once

#include <vector>

#include "mantissa/nn/module.hpp"

namespace mantissa::optim {

// Global L2 norm of all grads, accumulated in fp64 in a fixed order (the same
// value for any thread count). +inf/NaN if any grad element is non-finite.
double grad_norm(const std::vector<nn::Parameter*>& params);

// Returns the global L2 norm before clipping. If it is finite and larger than
// max_norm, every grad is multiplied by max_norm / (norm + 1e-6) (PyTorch's
// coefficient). max_norm <= 0 only measures. Non-finite norm: grads untouched.
double clip_grad_norm(const std::vector<nn::Parameter*>& params, double max_norm);

// grad *= factor for every parameter (loss-scale unscaling, accumulation).
void scale_grads(const std::vector<nn::Parameter*>& params, float factor);

// One pass: the sum of squares of every grad as it is, in fp64 in a fixed
// order, while multiplying it by `factor` (no write when factor is 1). The
// sum is inf/NaN exactly when some grad is (squares of finite floats cannot
// overflow an fp64 sum of fewer than 1e230 terms). The optimizer step's
// finiteness check, unscale and norm in one read of the gradients.
double scale_grads_sumsq(const std::vector<nn::Parameter*>& params, float factor);

// The clipping of clip_grad_norm for an already measured finite `norm`.
void clip_to_norm(const std::vector<nn::Parameter*>& params, double norm, double max_norm);

}  // namespace mantissa::optim
