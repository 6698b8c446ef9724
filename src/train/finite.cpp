#include "mantissa/train/finite.hpp"

#include "mantissa/train/checkpoint.hpp"

namespace mantissa::train {

bool all_finite(const Tensor& t) { return io::all_finite(t); }

std::string first_non_finite(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  for (const auto& [name, t] : tensors)
    if (!all_finite(t)) return name;
  return {};
}

}  // namespace mantissa::train
