// Scaled tensors (Scalify, Balança et al. 2024): data in any storage format plus
// FP32 power-of-two scales, standing for data x scale. One scale per tensor
// (what the propagation rules of propagate.hpp work on), per row, or per
// block of `block` consecutive elements of a row (for recipes that quantise
// finer). Scales are exact powers of two, so rescaling never rounds data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mantissa/tensor/tensor.hpp"

namespace mantissa::scalify {

// How a positive real scale becomes a power of two.
//   down (default): 2^floor(log2 x), keeps E[data^2] >= 1 (Scalify's choice)
//   up: 2^ceil(log2 x)
//   nearest: the nearer power of two in log2 (ties, x = 2^(k+1/2), go up)
//   stochastic: 2^floor or 2^ceil with P(up) = (x - lo) / (hi - lo), so the
//     expected scale equals x (jax-scalify issue #63)
enum class ScaleRounding : uint8_t { down, up, nearest, stochastic };
ScaleRounding parse_scale_rounding(const std::string& name);  // throws naming the valid ones
const char* scale_rounding_name(ScaleRounding r);

// Rounds positive finite scales; stochastic draws come from a counter-based
// hash of (seed, draw number), so a run is reproducible.
class Pow2Rounder {
 public:
  explicit Pow2Rounder(ScaleRounding mode = ScaleRounding::down, uint64_t seed = 0) : mode_(mode), seed_(seed) {}
  // x <= 0, inf or NaN throw std::invalid_argument (callers handle "any scale" tensors first).
  float operator()(double x);
  ScaleRounding mode() const { return mode_; }
  uint64_t draws() const { return draws_; }

 private:
  ScaleRounding mode_;
  uint64_t seed_;
  uint64_t draws_ = 0;
};
// 2^floor(log2 x) etc. without state (stochastic not allowed here).
float pow2_round(double x, ScaleRounding mode = ScaleRounding::down);
bool is_pow2(float s);

enum class Granularity : uint8_t { tensor, row, block };

struct ScaledTensor {
  Tensor data;                 // any floating dtype; data.scale() is always 1
  std::vector<float> scales;   // 1 (tensor), rows (row), rows x ceil(cols / block) (block)
  Granularity granularity = Granularity::tensor;
  int64_t block = 0;           // elements per block along the last dim (block granularity)

  const Shape& shape() const { return data.shape(); }
  int64_t numel() const { return data.numel(); }
  int64_t cols() const { return data.ndim() == 0 ? 1 : data.dim(-1); }
  int64_t rows() const { return numel() / (cols() == 0 ? 1 : cols()); }
  float scale() const;  // the per-tensor scale; throws for row/block granularity
  // Scale of element i (row-major index).
  float scale_of(int64_t i) const;
  // data x scale as fp32 / fp64.
  std::vector<float> values() const;
  std::vector<double> values_f64() const;
  // Throws std::invalid_argument unless every scale is a positive power of
  // two, the count fits the granularity and data carries scale 1.
  void validate(const std::string& where) const;
};

// Wraps plain values with scale 1 (fp32 data).
ScaledTensor scaled_from(const Tensor& values);
// Each group's scale is pow2_round(max |value| / target, rounding): with
// the default (down) a group's max |data| lies in [target, 2 target); with
// up, in (target/2, target], which is what a cast to a format of max
// `target` needs. All-zero / non-finite groups keep scale 1 ("any scale").
// Data is fp32; use cast() for storage formats.
ScaledTensor quantise_scales(const Tensor& values, Granularity g, int64_t block = 0, double target = 1.0,
                             ScaleRounding rounding = ScaleRounding::down);

// ---- scale ops -------------------------------------------------------------------------
// set_scale: same value, new per-tensor scale s (data rescaled exactly).
ScaledTensor set_scale(const ScaledTensor& x, float s);
// stop_scale: fold the scale into fp32 data (scale 1): the value leaves the
// scaled world, e.g. before an op that has no rule.
ScaledTensor stop_scale(const ScaledTensor& x);
// get_scale: the scale as a scaled scalar [1] of data 1 (per-tensor only).
ScaledTensor get_scale(const ScaledTensor& x);
// rebalance: move a factor 2^k from the data into the scale (data / 2^k,
// scale x 2^k); value unchanged.
ScaledTensor rebalance(const ScaledTensor& x, int k);

// Dynamic rescale: recompute the per-tensor scale from the data's norm.
enum class Norm : uint8_t { max, l1, l2 };  // max |v|, mean |v|, sqrt(mean v^2)
Norm parse_norm(const std::string& name);
const char* norm_name(Norm n);
// New scale = max(pow2_round(norm(value)), floor); value unchanged; zero or
// non-finite tensors keep their scale ("any scale").
ScaledTensor dynamic_rescale(const ScaledTensor& x, Norm norm, Pow2Rounder& rounder,
                             float floor = 1.0f / 16384.0f);

// Cast the data to a storage format (round-to-nearest-even; overflow follows
// the format as in ml_dtypes, inf or NaN, so a bad scale shows); scales untouched.
ScaledTensor cast(const ScaledTensor& x, DType dtype);

}  // namespace mantissa::scalify
