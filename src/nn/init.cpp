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

}  // namespace mantissa::nn
