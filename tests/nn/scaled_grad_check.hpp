// The check the unit-model tests share: each parameter's gradient, divided by the constant
// factor its unit scales put on it, equals the central finite difference (step h) of the
// model's summed loss on the batch, at the parameter's largest-gradient element and one more
// picked by `pick`; tolerance 3% of the largest scaled gradient + 2e-3. Returns the number
// of elements checked.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "mantissa/nn/module.hpp"

namespace mantissa::unit_test {

inline int check_scaled_gradient(nn::Model& m, const nn::Batch& batch, autograd::Parameter& p, double factor,
                                 std::mt19937_64& pick, float h = 1e-2f) {
  const std::vector<float> grad = p.grad.to_vector();
  size_t top = 0;
  for (size_t i = 0; i < grad.size(); ++i)
    if (std::fabs(grad[i]) > std::fabs(grad[top])) top = i;
  const double scale = std::fabs(grad[top]) / factor;
  int checked = 0;
  for (size_t i : {top, static_cast<size_t>(pick() % grad.size())}) {
    float* v = p.value.f32() + i;
    const float keep = *v;
    *v = keep + h;
    ++p.version;
    const double up = m.evaluate(batch).sum;
    *v = keep - h;
    ++p.version;
    const double down = m.evaluate(batch).sum;
    *v = keep;
    ++p.version;
    EXPECT_NEAR(grad[i] / factor, (up - down) / (2.0 * h), 0.03 * scale + 2e-3) << "element " << i << ", factor " << factor;
    ++checked;
  }
  return checked;
}

}  // namespace mantissa::unit_test
