#include "mantissa/optim/schedule.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace mantissa::optim {

void LrSchedule::validate() const {
  if (!(std::isfinite(max_lr) && max_lr > 0))
    throw std::invalid_argument("learning rate must be a positive number, got " + std::to_string(max_lr));
  if (!(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= max_lr))
    throw std::invalid_argument("min learning rate must be in [0, lr], got " + std::to_string(min_lr));
  if (warmup_steps < 0) throw std::invalid_argument("warm-up steps must be >= 0");
  if (decay_steps < 0) throw std::invalid_argument("decay steps must be >= 0");
}

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps)
    return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps + 1);
  if (decay_steps <= warmup_steps) return max_lr;
  if (step > decay_steps) return min_lr;
  const double ratio = static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps - warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace mantissa::optim
