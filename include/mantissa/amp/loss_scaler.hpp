// Loss scaling, with torch GradScaler's state machine for the dynamic case:
//   non-finite gradient -> skip the step, scale *= backoff, tracker = 0
//   finite gradient     -> tracker += 1; at growth_interval: scale *= growth, tracker = 0
// optionally clamped to [min_scale, max_scale]. Static scaling keeps the scale
// and still skips non-finite steps; "none" is a static scale of 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mantissa/recipe/recipe.hpp"
#include "mantissa/nn/module.hpp"

namespace mantissa::amp {

class LossScaler {
 public:
  explicit LossScaler(const recipe::LossScaleConfig& config = {});

  // The factor the loss (and so every gradient) is multiplied by this step.
  double scale() const { return scale_; }
  const recipe::LossScaleConfig& config() const { return config_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t skipped_steps() const { return skipped_; }

  // Multiplies every gradient by 1/scale in place and reports whether all of
  // them are finite (checked on the values before unscaling, in one pass).
  // Call exactly once per optimizer step, before clipping.
  bool unscale_and_check(const std::vector<autograd::Parameter*>& params) const;
  // The same pass, returning the sum of squares of the gradients before
  // unscaling (inf/NaN when one is not finite; optim::scale_grads_sumsq).
  double unscale_sumsq(const std::vector<autograd::Parameter*>& params) const;
  // The factor unscaling multiplies by: the fp32 reciprocal of the scale.
  float unscale_factor() const { return static_cast<float>(1.0 / scale_); }

  // Advances the state machine after a step; found_inf means the step was skipped.
  void update(bool found_inf);

  // Serialised state (scale, tracker, skipped count and the configuration).
  std::string state_json() const;
  void load_state_json(const std::string& json);  // throws std::invalid_argument

 private:
  recipe::LossScaleConfig config_;
  double scale_ = 1.0;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace mantissa::amp
