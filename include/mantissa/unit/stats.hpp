// Scale statistics of a tensor, as the unit-scaling analysis needs them
// (analyse/analyse.hpp): how big the values are, and what share of them a
// low-precision format could not represent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "mantissa/formats/format.hpp"

namespace mantissa::unit {

// Shares are fractions of all n values (zeros included). Against a format,
// rounding to nearest-even:
//   underflow: non-zero, |x| <= min_subnormal / 2: rounds to zero (formats
//              without subnormals: |x| < min_normal, flushed);
//   subnormal: min_subnormal / 2 < |x| < min_normal - min_subnormal / 2:
//              survives but lands in the subnormal range with fewer bits
//              (always 0 for formats without subnormals);
//   overflow:  |x| > max finite, inf included (NaN counted in `nan` only).
// Without a format the three shares are 0.
struct TensorStats {
  int64_t n = 0;
  double mean = 0;      // all statistics skip NaN values
  double rms = 0;       // sqrt(mean x^2)
  double std = 0;       // population standard deviation
  double mean_abs = 0;
  double max_abs = 0;
  double min_abs = 0;   // smallest non-zero |x|; 0 if every value is zero
  double zero = 0;      // share exactly zero
  double underflow = 0;
  double subnormal = 0;
  double overflow = 0;
  double nan = 0;       // share NaN
};

// fp64 accumulation, two passes (mean first) so std does not cancel;
// OpenMP above 64 Ki values.
TensorStats stats(const float* x, size_t n, const formats::Format* fmt = nullptr);

// Exponent histogram: counts of floor(log2 |x|) for non-zero finite x,
// clamped into [lo, hi] (the ends collect everything beyond), plus zeros and
// non-finite values counted apart. The Micikevicius et al. figure.
struct ExponentHistogram {
  int lo = 0, hi = 0;
  std::vector<int64_t> counts;  // counts[e - lo] for e in [lo, hi]
  int64_t zeros = 0;
  int64_t nonfinite = 0;
};
ExponentHistogram exponent_histogram(const float* x, size_t n, int lo, int hi);

enum class Pass { forward, backward };
const char* pass_name(Pass p);

struct ScaleRow {
  std::string op;
  Pass pass = Pass::forward;
  TensorStats stats;
};

// Collects one row per tracked tensor: forward rows for op outputs in model
// order, backward rows for gradients (usually recorded in reverse order).
// The format of each pass is what its shares are measured against (e.g.
// e4m3 forward and e5m2 backward for unit-fp8).
class ScaleRecorder {
 public:
  ScaleRecorder() = default;
  ScaleRecorder(std::optional<formats::Format> forward_format, std::optional<formats::Format> backward_format);

  void record(std::string op, Pass pass, const float* x, size_t n);
  const std::vector<ScaleRow>& rows() const { return rows_; }
  // Forward rows in recorded order, then for each op (in the order its
  // forward row appeared) its backward rows, then backward rows of ops never
  // seen forward, in recorded order: model order for both passes.
  std::vector<ScaleRow> model_order() const;
  const formats::Format* format(Pass p) const;

  // CSV with header op,pass,rms,std,mean_abs,max_abs,min_abs,underflow,
  // subnormal,overflow (rows in model order, %.6g), written atomically.
  std::string csv() const;
  void write_csv(const std::string& path) const;
  // Aligned, human-readable table of the same rows.
  std::string table() const;

 private:
  std::optional<formats::Format> forward_format_, backward_format_;
  std::vector<ScaleRow> rows_;
};

}  // namespace mantissa::unit
