#include "mantissa/train/finite.hpp"

#include <cmath>

namespace mantissa::train {

bool all_finite(const Tensor& t) {
  if (!t.defined() || t.dtype() == DType::i32) return true;
  if (!std::isfinite(t.scale()) || !(t.scale() > 0)) return false;
  const Tensor f = t.dtype() == DType::f32 ? t : t.to(DType::f32, MemoryKind::workspace);
  const float* v = f.f32();
  const int64_t n = f.numel();
  // Sum of x * 0: 0 if every x is finite, NaN otherwise; one vectorised pass.
  float acc = 0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) acc += v[i] * 0.0f;
  return acc == 0.0f;
}

std::string first_non_finite(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  for (const auto& [name, t] : tensors)
    if (!all_finite(t)) return name;
  return {};
}

}  // namespace mantissa::train
