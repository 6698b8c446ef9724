// Reading an optimizer state tensor in chunks of float32: the fp32 values as
// they are, or a low-precision state's decoded codes x its power-of-two scale.
#pragma once

#include <cstdint>
#include <cstring>

#include "mantissa/formats/convert.hpp"
#include "mantissa/tensor/tensor.hpp"

namespace mantissa::optim::detail {

// buf[0, n) = decoded values x scale of t's elements [begin, begin + n)
// (an fp32 tensor's values are copied: its scale is 1).
inline void load_chunk(const Tensor& t, int64_t begin, int64_t n, float* buf) {
  if (t.dtype() == DType::f32) {
    std::memcpy(buf, t.f32() + begin, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const auto& fmt = formats::preset(dtype_format_name(t.dtype()));
  const auto* codes = static_cast<const char*>(t.raw()) + static_cast<size_t>(begin) * dtype_size(t.dtype());
  formats::dequantize(fmt, codes, buf, static_cast<size_t>(n));
  const float s = t.scale();
  if (s != 1.0f)
    for (int64_t i = 0; i < n; ++i) buf[i] *= s;
}

}  // namespace mantissa::optim::detail
