#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "mantissa/formats/convert.hpp"
#include "mantissa/scalify/scalify.hpp"

namespace mantissa::scalify {

void RescaleCounter::add(const std::string& site) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[site];
}

std::map<std::string, int64_t> RescaleCounter::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

int64_t RescaleCounter::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [site, c] : counts_) n += c;
  return n;
}

float dynamic_scale(const Tensor& values, const CastSpec& spec) {
  if (values.dtype() != DType::f32) throw std::invalid_argument("dynamic_scale: fp32 values expected");
  const float* v = values.f32();
  const int64_t n = values.numel();
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(v[i]));
    if (spec.norm == Norm::max) acc = std::max(acc, a);
    else if (spec.norm == Norm::l1) acc += a;
    else acc += a * a;
  }
  const auto count = static_cast<double>(n > 0 ? n : 1);
  if (spec.norm == Norm::l1) acc /= count;
  if (spec.norm == Norm::l2) acc = std::sqrt(acc / count);
  if (!(acc > 0) || !std::isfinite(acc)) return 1.0f;
  if (spec.rounding == ScaleRounding::stochastic)
    throw std::invalid_argument("dynamic_scale: stochastic scale rounding needs a Pow2Rounder (use down/up/nearest)");
  return std::max(pow2_round(acc, spec.rounding), spec.floor);
}

Tensor cast_values(const Tensor& in, const CastSpec& spec, float scale) {
  if (!is_pow2(scale)) throw std::invalid_argument("cast: scale " + std::to_string(scale) + " is not a power of two");
  Tensor out = Tensor::empty(in.shape(), DType::f32);
  const auto n = static_cast<size_t>(in.numel());
  const float inv = 1.0f / scale;
  for (size_t i = 0; i < n; ++i) out.f32()[i] = in.f32()[i] * inv;
  formats::RoundOptions opt;
  opt.saturate = spec.saturate;
  formats::fake_quantize(formats::preset(dtype_format_name(spec.format)), out.f32(), out.f32(), n, opt);
  for (size_t i = 0; i < n; ++i) out.f32()[i] *= scale;
  return out;
}

namespace {

float cast_scale(const Tensor& v, const CastSpec& spec, RescaleCounter* counter, const std::string& site) {
  if (!spec.dynamic) return spec.scale;
  if (counter) counter->add(site);
  return dynamic_scale(v, spec);
}

}  // namespace

autograd::Var cast_on_forward(autograd::Tape& t, const autograd::Var& x, const CastSpec& spec, RescaleCounter* counter,
                              const std::string& site) {
  Tensor y = cast_values(x.value, spec, cast_scale(x.value, spec, counter, site));
  const bool record = t.wants_grad({&x});
  autograd::Var out = autograd::Tape::result(std::move(y), record);
  if (record)
    t.record([xn = x.node, on = out.node]() {
      if (on->has_grad()) xn->accumulate(on->grad);
    });
  return out;
}

autograd::Var cast_on_backward(autograd::Tape& t, const autograd::Var& x, const CastSpec& spec, RescaleCounter* counter,
                               const std::string& site) {
  const bool record = t.wants_grad({&x});
  autograd::Var out = autograd::Tape::result(x.value, record);
  if (record)
    t.record([spec, counter, site, xn = x.node, on = out.node]() {
      if (!on->has_grad()) return;
      xn->accumulate(cast_values(on->grad, spec, cast_scale(on->grad, spec, counter, site)));
    });
  return out;
}

}  // namespace mantissa::scalify
