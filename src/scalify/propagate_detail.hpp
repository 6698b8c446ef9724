// Helpers the scale-propagation rule files share (defined in propagate.cpp,
// except the inline ones): the data of a per-tensor scaled tensor as floats,
// the check that a tensor has one scale, a result from data and scale, the
// error for bad shapes and the check that a scale stays inside fp32.
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

// A product or quotient of power-of-two scales as a float scale, refusing results outside fp32.
inline float scale_in_range(double s, std::string_view op) {
  need_shape(s >= 0x1p-126 && s <= 0x1p127, op, "gives a scale outside the fp32 range");
  return static_cast<float>(s);
}

}  // namespace mantissa::scalify::detail
