// MLP classifier: inputs [B, features] -> hidden layers (linear + ReLU or
// GELU) -> linear -> class logits; cross-entropy with ignore index (-1).
// Parameters: layers.{i}.weight [in, out] and layers.{i}.bias [out].
// Initialisation: one Rng(seed) draws, layer by layer, weights
// N(0, gain^2 / fan_in) with gain sqrt(2) before a ReLU/GELU and 1 for the
// output layer (He / LeCun normal); biases 0. Biases are not decayed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mantissa/autograd/tape.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/unit/config.hpp"

namespace mantissa::autograd {
struct LossStats;
}

namespace mantissa::nn {

struct MLPConfig {
  int64_t inputs = 784;
  std::vector<int64_t> hidden = {256};
  int64_t classes = 10;
  std::string activation = "relu";  // relu | gelu
  uint64_t seed = 0;
  // Unit-scaled parametrisation: weights N(0,1), unit linear
  // scales, scaled activation, unit readout and cross-entropy.
  unit::UnitConfig unit;

  void validate() const;
  std::string to_json() const;
  static MLPConfig from_json(const std::string& text);
};

class MLP : public Model {
 public:
  explicit MLP(const MLPConfig& config);
  MLP(const MLP&) = delete;
  MLP& operator=(const MLP&) = delete;

  LossSum forward_backward(const Batch& batch, float grad_scale) override;
  LossSum evaluate(const Batch& batch) override;
  std::string config_json() const override { return config_.to_json(); }
  std::string kind() const override { return "mlp"; }
  Task task() const override { return Task::classifier; }
  const unit::UnitConfig& unit() const override { return config_.unit; }
  const MLPConfig& config() const { return config_; }

  // logits [B, classes] for x f32 [B, inputs] on the given tape.
  autograd::Var forward(autograd::Tape& tape, const autograd::Var& x);
  Tensor logits(const Tensor& x) override;

 private:
  void check_batch(const Batch& batch) const;
  autograd::Var loss(autograd::Tape& tape, const autograd::Var& logits, const Tensor& targets, autograd::LossStats* stats);

  MLPConfig config_;
};

}  // namespace mantissa::nn
