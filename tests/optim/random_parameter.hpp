// A parameter of the optimizer tests: values drawn from `nd` with `rng`,
// zero gradient, weight decay for names starting with 'w'.
#pragma once

#include <random>
#include <string>

#include "mantissa/autograd/parameter.hpp"

namespace mantissa::optim_test {

inline autograd::Parameter random_parameter(const std::string& name, const Shape& shape, std::mt19937_64& rng,
                                      std::normal_distribution<float>& nd) {
  autograd::Parameter p;
  p.name = name;
  p.value = Tensor::empty(shape, DType::f32, MemoryKind::parameter);
  p.grad = Tensor::zeros(shape, DType::f32, MemoryKind::gradient);
  for (int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] = nd(rng);
  p.decay = name[0] == 'w';
  return p;
}

}  // namespace mantissa::optim_test
