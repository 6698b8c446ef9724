// Element reads for the inspector's probe: fn(read) with read(i) = element i
// of an f32 or bf16 tensor (any other dtype widened to f32 first) times
// `scale`, as a double; the reader is a lambda, so loops over it inline.
#pragma once

#include <bit>
#include <cstdint>

#include "mantissa/tensor/tensor.hpp"

namespace mantissa::inspect::detail {

template <class Fn>
void with_reader(const Tensor& t, float scale, Fn fn) {
  if (t.dtype() == DType::bf16) {
    const uint16_t* b = t.data<uint16_t>();
    fn([b, scale](int64_t i) { return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(b[i]) << 16) * scale); });
    return;
  }
  const Tensor f = t.dtype() == DType::f32 ? t : t.to(DType::f32, MemoryKind::workspace);
  const float* p = f.f32();
  fn([p, scale](int64_t i) { return static_cast<double>(p[i] * scale); });
}

}  // namespace mantissa::inspect::detail
