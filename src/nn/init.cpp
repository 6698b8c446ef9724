#include "mantissa/nn/init.hpp"

#include <cmath>
#include <numbers>

namespace mantissa::nn {

double Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double a = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(a);
  has_spare_ = true;
  return r * std::cos(a);
}

void init_normal(Tensor& value, Rng& rng, double stddev) {
  float* p = value.f32();
  for (int64_t i = 0; i < value.numel(); ++i) p[i] = static_cast<float>(rng.normal() * stddev);
}

std::unique_ptr<Parameter> make_parameter(std::string name, const Shape& shape, bool decay, int64_t fan_in) {
  auto p = std::make_unique<Parameter>();
  p->name = std::move(name);
  p->value = Tensor::zeros(shape, DType::f32, MemoryKind::parameter);
  p->grad = Tensor::zeros(shape, DType::f32, MemoryKind::gradient);
  p->decay = decay;
  p->fan_in = fan_in;
  return p;
}

}  // namespace mantissa::nn
