#include "mantissa/train/finite.hpp"


namespace mantissa::train {

std::string first_non_finite(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  for (const auto& [name, t] : tensors)
    if (!all_finite(t)) return name;
  return {};
}

}  // namespace mantissa::train
