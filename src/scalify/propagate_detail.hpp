// Helpers the scale-propagation rule files share (defined in propagate.cpp,
// except need_shape): the data of a per-tensor scaled tensor as floats, the
// check that a tensor has one scale, a result from data and scale, and the
// error for bad shapes.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mantissa/scalify/scaled.hpp"

namespace mantissa::scalify::detail {

std::vector<float> data_of(const ScaledTensor& x);
void need_tensor_scale(const ScaledTensor& x, std::string_view op);
ScaledTensor make(std::vector<float> data, const Shape& shape, float scale);

inline void need_shape(bool ok, std::string_view op, const std::string& what) {
  if (!ok) throw std::invalid_argument("scale propagation: op '" + std::string(op) + "' " + what);
}

}  // namespace mantissa::scalify::detail
