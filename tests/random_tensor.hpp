// A tensor of normal draws N(0, sd^2) from a fixed seed, for tests that
// need realistic operands.
#pragma once

#include <cstdint>
#include <random>

#include "mantissa/tensor/tensor.hpp"

namespace mantissa {

inline Tensor random_tensor(const Shape& s, uint64_t seed, float sd, MemoryKind kind = MemoryKind::activation) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0, sd);
  Tensor t = Tensor::empty(s, DType::f32, kind);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = n(rng);
  return t;
}

}  // namespace mantissa
