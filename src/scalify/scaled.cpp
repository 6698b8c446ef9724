#include "mantissa/scalify/scaled.hpp"

#include <cmath>
#include <stdexcept>

#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/round.hpp"

namespace mantissa::scalify {

namespace {

void check_positive(double x, const char* what) {
  if (!(x > 0) || !std::isfinite(x))
    throw std::invalid_argument(std::string(what) + ": scale " + std::to_string(x) + " is not positive and finite");
}

// Exponent e with 2^e <= x < 2^(e+1).
int floor_log2(double x) {
  int e = 0;
  const double f = std::frexp(x, &e);  // x = f 2^e, f in [0.5, 1)
  (void)f;
  return e - 1;
}

float pow2f(int e) {
  if (e < -126) e = -126;  // keep scales normal fp32 numbers
  if (e > 127) e = 127;
  return std::ldexp(1.0f, e);
}

// fp32 values of the data (scale not applied).
std::vector<float> decoded(const Tensor& t) {
  Tensor plain = t;
  plain.set_scale(1.0f);
  return plain.to_vector();
}

}  // namespace

ScaleRounding parse_scale_rounding(const std::string& name) {
  if (name == "down") return ScaleRounding::down;
  if (name == "up") return ScaleRounding::up;
  if (name == "nearest") return ScaleRounding::nearest;
  if (name == "stochastic") return ScaleRounding::stochastic;
  throw std::invalid_argument("unknown scale rounding '" + name + "' (valid: down, up, nearest, stochastic)");
}

const char* scale_rounding_name(ScaleRounding r) {
  switch (r) {
    case ScaleRounding::down: return "down";
    case ScaleRounding::up: return "up";
    case ScaleRounding::nearest: return "nearest";
    case ScaleRounding::stochastic: return "stochastic";
  }
  return "?";
}

float pow2_round(double x, ScaleRounding mode) {
  check_positive(x, "pow2_round");
  const int lo = floor_log2(x);
  const double low = std::ldexp(1.0, lo);
  if (low == x) return pow2f(lo);
  switch (mode) {
    case ScaleRounding::down: return pow2f(lo);
    case ScaleRounding::up: return pow2f(lo + 1);
    case ScaleRounding::nearest: return x < low * std::sqrt(2.0) ? pow2f(lo) : pow2f(lo + 1);
    case ScaleRounding::stochastic: break;
  }
  throw std::invalid_argument("pow2_round: stochastic rounding needs a Pow2Rounder (it draws random bits)");
}

float Pow2Rounder::operator()(double x) {
  if (mode_ != ScaleRounding::stochastic) return pow2_round(x, mode_);
  check_positive(x, "pow2_round");
  const int lo = floor_log2(x);
  const double low = std::ldexp(1.0, lo);
  // P(up) = (x - lo) / (hi - lo) = x / low - 1, compared with 24 random bits.
  const double frac = x / low - 1.0;
  const double u = (formats::stochastic_bits(seed_, draws_++, 24) + 0.5) / 16777216.0;
  return pow2f(u < frac ? lo + 1 : lo);
}

bool is_pow2(float s) {
  if (!(s > 0) || !std::isfinite(s)) return false;
  int e = 0;
  return std::frexp(s, &e) == 0.5f;
}

float ScaledTensor::scale() const {
  if (granularity != Granularity::tensor || scales.size() != 1)
    throw std::invalid_argument("scaled tensor: a per-tensor scale was asked of a per-row/per-block tensor");
  return scales[0];
}

float ScaledTensor::scale_of(int64_t i) const {
  switch (granularity) {
    case Granularity::tensor: return scales[0];
    case Granularity::row: return scales[static_cast<size_t>(i / cols())];
    case Granularity::block: {
      const int64_t per_row = (cols() + block - 1) / block;
      return scales[static_cast<size_t>((i / cols()) * per_row + (i % cols()) / block)];
    }
  }
  return 1.0f;
}

std::vector<float> ScaledTensor::values() const {
  std::vector<float> v = decoded(data);
  for (size_t i = 0; i < v.size(); ++i) v[i] *= scale_of(static_cast<int64_t>(i));
  return v;
}

std::vector<double> ScaledTensor::values_f64() const {
  const std::vector<float> d = decoded(data);
  std::vector<double> v(d.size());
  for (size_t i = 0; i < d.size(); ++i) v[i] = static_cast<double>(d[i]) * scale_of(static_cast<int64_t>(i));
  return v;
}

void ScaledTensor::validate(const std::string& where) const {
  if (!data.defined()) throw std::invalid_argument(where + ": scaled tensor has no data");
  if (data.dtype() == DType::i32) throw std::invalid_argument(where + ": scaled tensor data must be floating");
  if (data.scale() != 1.0f) throw std::invalid_argument(where + ": scaled tensor data carries its own scale");
  size_t want = 1;
  if (granularity == Granularity::row) want = static_cast<size_t>(rows());
  if (granularity == Granularity::block) {
    if (block <= 0) throw std::invalid_argument(where + ": block granularity needs block > 0");
    want = static_cast<size_t>(rows() * ((cols() + block - 1) / block));
  }
  if (scales.size() != want)
    throw std::invalid_argument(where + ": " + std::to_string(scales.size()) + " scales for " + std::to_string(want) +
                                " groups");
  for (float s : scales)
    if (!is_pow2(s)) throw std::invalid_argument(where + ": scale " + std::to_string(s) + " is not a power of two");
}

ScaledTensor scaled_from(const Tensor& values) {
  ScaledTensor s;
  s.data = values.dtype() == DType::f32 && values.scale() == 1.0f ? values : Tensor::from(values.to_vector(), values.shape());
  s.scales = {1.0f};
  return s;
}

ScaledTensor quantise_scales(const Tensor& values, Granularity g, int64_t block, double target, ScaleRounding rounding) {
  check_positive(target, "quantise_scales target");
  ScaledTensor out;
  out.granularity = g;
  out.block = g == Granularity::block ? block : 0;
  const std::vector<float> v = values.to_vector();
  out.data = Tensor::empty(values.shape(), DType::f32, values.memory_kind());
  const int64_t cols = values.ndim() == 0 ? 1 : values.dim(-1), rows = values.numel() / (cols == 0 ? 1 : cols);
  int64_t group = values.numel();  // elements per group along a row
  if (g == Granularity::row) group = cols;
  if (g == Granularity::block) {
    if (block <= 0) throw std::invalid_argument("quantise_scales: block granularity needs block > 0");
    group = block;
  }
  auto scale_range = [&](int64_t begin, int64_t end) {
    double amax = 0;
    for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(static_cast<double>(v[static_cast<size_t>(i)])));
    const float s = amax > 0 && std::isfinite(amax) ? pow2_round(amax / target, rounding) : 1.0f;
    for (int64_t i = begin; i < end; ++i) out.data.f32()[i] = v[static_cast<size_t>(i)] / s;
    out.scales.push_back(s);
  };
  if (g == Granularity::tensor) scale_range(0, values.numel());
  else
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; c += group) scale_range(r * cols + c, r * cols + std::min(cols, c + group));
  return out;
}

ScaledTensor set_scale(const ScaledTensor& x, float s) {
  if (!is_pow2(s)) throw std::invalid_argument("set_scale: " + std::to_string(s) + " is not a power of two");
  const std::vector<float> v = x.values();
  ScaledTensor out;
  out.data = Tensor::empty(x.shape(), DType::f32);
  for (size_t i = 0; i < v.size(); ++i) out.data.f32()[i] = v[i] / s;
  out.scales = {s};
  return out;
}

ScaledTensor stop_scale(const ScaledTensor& x) { return scaled_from(Tensor::from(x.values(), x.shape())); }

ScaledTensor get_scale(const ScaledTensor& x) {
  ScaledTensor out;
  out.data = Tensor::from({1.0f}, {1});
  out.scales = {x.scale()};
  return out;
}

ScaledTensor rebalance(const ScaledTensor& x, int k) {
  ScaledTensor out = x;
  const float f = std::ldexp(1.0f, k);
  std::vector<float> d = decoded(x.data);
  for (float& e : d) e /= f;
  out.data = Tensor::from(d, x.shape());
  for (float& s : out.scales) {
    s *= f;
    if (!is_pow2(s)) throw std::invalid_argument("rebalance: scale leaves the fp32 range");
  }
  return out;
}

Norm parse_norm(const std::string& name) {
  if (name == "max") return Norm::max;
  if (name == "l1") return Norm::l1;
  if (name == "l2") return Norm::l2;
  throw std::invalid_argument("unknown rescale norm '" + name + "' (valid: max, l1, l2)");
}

const char* norm_name(Norm n) {
  switch (n) {
    case Norm::max: return "max";
    case Norm::l1: return "l1";
    case Norm::l2: return "l2";
  }
  return "?";
}

ScaledTensor dynamic_rescale(const ScaledTensor& x, Norm norm, Pow2Rounder& rounder, float floor) {
  const std::vector<double> v = x.values_f64();
  double acc = 0;
  for (double e : v) {
    if (norm == Norm::max) acc = std::max(acc, std::fabs(e));
    else if (norm == Norm::l1) acc += std::fabs(e);
    else acc += e * e;
  }
  const auto n = static_cast<double>(v.empty() ? 1 : v.size());
  if (norm == Norm::l1) acc /= n;
  if (norm == Norm::l2) acc = std::sqrt(acc / n);
  if (!(acc > 0) || !std::isfinite(acc)) return x;  // zero / inf: any scale
  return set_scale(x, std::max(rounder(acc), floor));
}

ScaledTensor cast(const ScaledTensor& x, DType dtype) {
  ScaledTensor out = x;
  out.data = x.data.to(dtype);
  return out;
}

}  // namespace mantissa::scalify
