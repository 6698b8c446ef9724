// Gradient-norm clipping (torch.nn.utils.clip_grad_norm_ semantics with
// error_if_nonfinite=False, but a non-finite norm leaves the grads untouched
// so the caller can skip the step instead of writing NaN into them).
#pragma once

#include <vector>

#include "mantissa/autograd/parameter.hpp"
#include "mantissa/optim/owned.hpp"

namespace mantissa::optim {

// Global L2 norm of all grads, accumulated in fp64 in a fixed order (the same
// value for any thread count). +inf/NaN if any grad element is non-finite.
double grad_norm(const std::vector<autograd::Parameter*>& params);

// Returns the global L2 norm before clipping. If it is finite and larger than
// max_norm, every grad is multiplied by max_norm / (norm + 1e-6) (PyTorch's
// coefficient). max_norm <= 0 only measures. Non-finite norm: grads untouched.
double clip_grad_norm(const std::vector<autograd::Parameter*>& params, double max_norm);

// grad *= factor for every parameter (loss-scale unscaling, accumulation);
// with `owned`, for the owned elements only.
void scale_grads(const std::vector<autograd::Parameter*>& params, float factor, const OwnedRanges* owned = nullptr);

// One pass: the sum of squares of every grad as it is, in fp64 in a fixed
// order, while multiplying it by `factor` (no write when factor is 1). The
// sum is inf/NaN exactly when some grad is (squares of finite floats cannot
// overflow an fp64 sum of fewer than 1e230 terms). The optimizer step's
// finiteness check, unscale and norm in one read of the gradients.
double scale_grads_sumsq(const std::vector<autograd::Parameter*>& params, float factor);
// The same pass, returning the fp64 sum of each chunk of kSpanElems elements
// (in chunk order; scale_grads_sumsq adds them up from 0 in that order), of
// the owned elements only when `owned` is given. A sharded run adds every
// rank's chunk sums in rank order and gets scale_grads_sumsq's value bit for
// bit, as long as its shards start and end on chunk boundaries.
std::vector<double> scale_grads_chunk_sumsq(const std::vector<autograd::Parameter*>& params, float factor,
                                            const OwnedRanges* owned = nullptr);

// The clipping of clip_grad_norm for an already measured finite `norm`.
void clip_to_norm(const std::vector<autograd::Parameter*>& params, double norm, double max_norm,
                  const OwnedRanges* owned = nullptr);

}  // namespace mantissa::optim
