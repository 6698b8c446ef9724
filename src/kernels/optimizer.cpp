// Fused AdamW: one read of (p, g, m, v) and one write of (p, m, v) per element,
// instead of the five passes of the unfused update.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/parallel.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace mantissa::kernels {

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t step, float grad_scale) {
  if (step < 1) throw std::invalid_argument("adamw_step: step counts from 1, got " + std::to_string(step));
  // Bias corrections in double: beta^step for large steps loses nothing this way.
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - lr * weight_decay;
  const float one_minus_b1 = 1.0f - beta1, one_minus_b2 = 1.0f - beta2;
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + one_minus_b1 * g;
    const float vi = beta2 * v[i] + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
    param[i] = param[i] * decay - step_size * mi / denom;
  }
}

}  // namespace mantissa::kernels
