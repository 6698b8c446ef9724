// Finiteness of model and optimizer tensors: a checkpoint holding a NaN or an
// infinity is never written and never loaded.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mantissa/tensor/tensor.hpp"

namespace mantissa::train {

// True if every value of t (decoded, times its scale) is finite and its scale
// is finite and > 0. Integer tensors are always finite.
bool all_finite(const Tensor& t);
// The name of the first tensor that is not all_finite, or empty.
std::string first_non_finite(const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace mantissa::train
