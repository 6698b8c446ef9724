// Weight decay independent of the learning-rate multipliers (u-muP's
// independent weight decay), as a wrapper around any optimizer.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "mantissa/optim/optimizer.hpp"

namespace mantissa::optim {

// Wraps an optimizer built with weight decay 0 and applies decoupled weight
// decay itself after each update: p *= 1 - (lr / base_lr) * decay for every
// parameter with Parameter::decay, whatever its learning-rate multiplier
// (per step, decay x the schedule factor). Everything else (state,
// checkpoints, step count) is the inner optimizer's.
class IndependentDecay final : public Optimizer {
 public:
  IndependentDecay(std::unique_ptr<Optimizer> inner, double base_lr, double decay);
  void step(double lr) override;
  std::string type() const override { return inner_->type(); }
  std::map<std::string, Tensor> state_tensors() const override { return inner_->state_tensors(); }
  std::string state_json() const override { return inner_->state_json(); }
  void load_state(const std::map<std::string, Tensor>& tensors, const std::string& json) override;
  void shard(const OwnedRanges& owned) override;
  Optimizer& inner() { return *inner_; }

 private:
  std::unique_ptr<Optimizer> inner_;
  double base_lr_, decay_;
};

}  // namespace mantissa::optim
