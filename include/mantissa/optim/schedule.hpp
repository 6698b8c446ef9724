// Learning-rate schedule: linear warm-up then cosine decay to min_lr, with
// nanoGPT's get_lr semantics (train.py), steps counted from 0:
//   step <  warmup_steps:  lr = max_lr * (step + 1) / (warmup_steps + 1)
//   step >  decay_steps:   lr = min_lr
//   otherwise:             r = (step - warmup_steps) / (decay_steps - warmup_steps)
//                          lr = min_lr + 0.5 * (1 + cos(pi * r)) * (max_lr - min_lr)
// so the first step already has a non-zero lr, the peak max_lr is reached at
// step == warmup_steps, and min_lr at step == decay_steps (usually the total
// number of steps). decay_steps <= warmup_steps means constant max_lr after
// warm-up.
#pragma once

#include <cstdint>

namespace mantissa::optim {

struct LrSchedule {
  double max_lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 0;
  int64_t decay_steps = 0;
  // Throws std::invalid_argument for negative values or min_lr > max_lr.
  void validate() const;
  double at(int64_t step) const;
};

}  // namespace mantissa::optim
