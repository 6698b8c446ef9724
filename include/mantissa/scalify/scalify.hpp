// Scale-propagation ops inside the autograd engine:
// cast-on-forward and cast-on-backward of a value to a storage format at a
// power-of-two scale, either a given (propagated) scale or a dynamic one
// recomputed from the tensor's max / L1 / L2 norm on that pass only. The
// engine's values are fp32, so a cast is a rounding of value / scale into
// the format, times the scale (exactly what a real 1- or 2-byte tensor with
// that scale would decode to). Dynamic rescales are counted per name so
// recipes can report how many a layer needs (Scalify: about 2 per layer).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "mantissa/autograd/tape.hpp"
#include "mantissa/scalify/scaled.hpp"

namespace mantissa::scalify {

struct CastSpec {
  DType format = DType::f16;  // any floating dtype
  // false: cast at `scale` (a propagated power of two); true: the scale is
  // recomputed from this tensor on the cast's pass (dynamic rescale).
  bool dynamic = false;
  float scale = 1.0f;
  Norm norm = Norm::max;
  ScaleRounding rounding = ScaleRounding::down;
  float floor = 0x1p-100f;  // smallest dynamic scale (data of tiny tensors may underflow below it)
  bool saturate = true;     // clamp to +-max instead of inf/NaN (so a bad scale cannot poison training)
};

// Counts dynamic rescales by site name (thread-safe).
class RescaleCounter {
 public:
  void add(const std::string& site);
  std::map<std::string, int64_t> counts() const;
  int64_t total() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> counts_;
};

// The scale a dynamic cast would use for these values: pow2_round(norm) or
// spec.floor; 1 when the tensor is zero or not finite ("any scale").
float dynamic_scale(const Tensor& values, const CastSpec& spec);
// out = round(in / scale into spec.format) x scale, fp32.
Tensor cast_values(const Tensor& in, const CastSpec& spec, float scale);

// Forward: y = cast(x); backward: dx += dy (straight-through).
autograd::Var cast_on_forward(autograd::Tape& t, const autograd::Var& x, const CastSpec& spec,
                              RescaleCounter* counter = nullptr, const std::string& site = "");
// Forward: y = x; backward: dx += cast(dy).
autograd::Var cast_on_backward(autograd::Tape& t, const autograd::Var& x, const CastSpec& spec,
                               RescaleCounter* counter = nullptr, const std::string& site = "");

}  // namespace mantissa::scalify
