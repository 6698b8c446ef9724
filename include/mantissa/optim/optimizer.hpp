// Optimizers over the models' fp32 master parameters: SGD (momentum,
// Nesterov), Adam and AdamW with PyTorch's update formulas, per-parameter
// learning-rate multipliers and weight-decay flags, and state that
// checkpoints save and restore.
//
// The update runs as one multi-tensor pass: every parameter is cut into
// chunks, and the chunks of all parameters are spread over OpenMP threads, so
// small tensors (biases, norm gains) do not each pay a parallel-region start.
// Every element's update is independent, so results are bit-identical for any
// thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mantissa/autograd/parameter.hpp"
#include "mantissa/optim/owned.hpp"
#include "mantissa/optim/state_format.hpp"
#include "mantissa/tensor/tensor.hpp"

namespace mantissa::optim {

namespace detail {
struct AdamScalars;
}

// Hyper-parameters of every optimizer; each one reads the fields it uses.
struct OptimizerConfig {
  std::string type = "adamw";  // "sgd", "adam" or "adamw"
  // Adam / AdamW (PyTorch defaults).
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // Adam / AdamW moment storage (state_format.hpp; parse_state_format reads
  // "fp32", "bf16", "fp16", "e4m3fn/fp16" (m/v), ...). Non-fp32 moments are
  // decoded, updated in fp32 and re-encoded with fresh per-tensor
  // power-of-two scales in one pass.
  StateFormat state_format;
  // SGD and Adam: L2 term added to the gradient (coupled). AdamW: decoupled,
  // param *= 1 - lr * weight_decay before the moment update. Parameters with
  // Parameter::decay == false get no weight decay in any optimizer.
  double weight_decay = 0.0;
  // SGD.
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // Non-empty: built sharded (Optimizer::shard), allocating only this share
  // of the state.
  OwnedRanges owned;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<autograd::Parameter*> params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter from its grad with base learning rate lr
  // (each parameter uses lr x its multiplier). Bumps Parameter::version.
  // Grads are read, not modified or zeroed.
  virtual void step(double lr) = 0;
  virtual std::string type() const = 0;  // "sgd", "adam", "adamw"

  // Number of step() calls so far (PyTorch's `step` state; Adam's bias
  // correction uses it).
  int64_t step_count() const { return steps_; }
  const std::vector<autograd::Parameter*>& parameters() const { return params_; }

  // Per-parameter learning-rate multiplier (default 1), e.g. for
  // parametrisation-dependent rules such as unit scaling's fan_in^-1/2.
  void set_lr_multiplier(size_t index, double multiplier);
  void set_lr_multipliers(const std::function<double(const autograd::Parameter&)>& rule);
  double lr_multiplier(size_t index) const { return lr_mult_.at(index); }

  // Checkpoint state. Tensors are named "<parameter name>.<state name>"
  // (e.g. "transformer.wte.weight.exp_avg") and share storage with the
  // optimizer (no copy). The JSON holds the type, step count and
  // hyper-parameters.
  virtual std::map<std::string, Tensor> state_tensors() const = 0;
  virtual std::string state_json() const;
  // Restores step count and state tensors; the optimizer must have been built
  // over parameters with the same names and shapes. Throws
  // std::invalid_argument naming the missing/mismatched tensor or a type
  // mismatch. Hyper-parameters stay those given at construction.
  virtual void load_state(const std::map<std::string, Tensor>& tensors, const std::string& json);

  // Sharded state (ZeRO stage 1): from now on the optimizer keeps state for,
  // and updates, only elements owned[i] of parameter i; its state tensors are
  // 1-D with owned[i].size() values (same names). Call before the first
  // step. Throws std::invalid_argument naming what cannot be sharded.
  virtual void shard(const OwnedRanges& owned);
  // The owned ranges, or null when not sharded (every element).
  const OwnedRanges* owned() const { return owned_.empty() ? nullptr : &owned_; }

 protected:
  // Where parameter i's owned elements start (its state's element 0).
  int64_t state_begin(size_t i) const { return owned_.empty() ? 0 : owned_[i].begin; }
  // Shape of parameter i's state tensors: the parameter's, or [owned size].
  Shape state_shape(size_t i) const;
  // What a state tensor's values may be: finite, or finite and >= 0 (a
  // second moment).
  enum class StateRange { finite, non_negative };
  // Copies tensors[name] into dst after checking its presence, dtype, shape,
  // scale and values (check_state_values); throws std::invalid_argument
  // naming the tensor.
  static void restore_tensor(const std::map<std::string, Tensor>& tensors, const std::string& name,
                             Tensor& dst, StateRange range = StateRange::finite);
  static void check_state_values(const Tensor& t, const std::string& name, StateRange range);
  // Parses the JSON of state_json(), checks the type and restores steps_;
  // returns nothing else so subclasses stay free in their extra keys.
  void restore_common(const std::string& json);

  std::vector<autograd::Parameter*> params_;
  std::vector<double> lr_mult_;
  int64_t steps_ = 0;
  OwnedRanges owned_;  // empty: not sharded
};

// Builds the optimizer named by config.type; throws std::invalid_argument for
// an unknown type or an out-of-range hyper-parameter.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config,
                                          std::vector<autograd::Parameter*> params);

// torch.optim.SGD: d = g + wd*p; buf = d at the first step, then
// buf = momentum*buf + (1-dampening)*d; d = nesterov ? d + momentum*buf : buf;
// p -= lr*d.
class SGD final : public Optimizer {
 public:
  SGD(std::vector<autograd::Parameter*> params, const OptimizerConfig& config);
  void step(double lr) override;
  std::string type() const override { return "sgd"; }
  std::map<std::string, Tensor> state_tensors() const override;
  std::string state_json() const override;
  void load_state(const std::map<std::string, Tensor>& tensors, const std::string& json) override;
  void shard(const OwnedRanges& owned) override;

 private:
  OptimizerConfig cfg_;
  std::vector<Tensor> momentum_;  // "momentum_buffer"; empty when momentum == 0
};

// torch.optim.Adam (decoupled == false: g += wd*p) and torch.optim.AdamW
// (decoupled == true: p *= 1 - lr*wd first). Then, with t = step count:
//   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
//   p -= (lr / (1-beta1^t)) * m / (sqrt(v) / sqrt(1-beta2^t) + eps)
// (eps outside the square root, as PyTorch). State: "exp_avg", "exp_avg_sq".
//
// Low-precision moments (config.state_format not fp32, MS-AMP O2 style):
// per parameter, pass 1 computes the new m and v in fp32 from the decoded
// stored ones and takes their max |value|; the per-tensor power-of-two
// scales are chosen from those maxima (state_scale_for); pass 2 recomputes
// m and v (same bits), updates p with these unrounded fp32 moments and
// stores m / scale_m and v / scale_v rounded to nearest-even into the
// 1- or 2-byte tensors. So the stored moments are exactly
// round(fp32 update of the decoded previous moments), never overflow, and a
// step costs two reads of g, m, v instead of a full fp32 copy of the state.
// The state tensors carry their scales (Tensor::scale), which checkpoints keep.
class Adam final : public Optimizer {
 public:
  Adam(std::vector<autograd::Parameter*> params, const OptimizerConfig& config, bool decoupled);
  void step(double lr) override;
  std::string type() const override { return decoupled_ ? "adamw" : "adam"; }
  std::map<std::string, Tensor> state_tensors() const override;
  std::string state_json() const override;
  void load_state(const std::map<std::string, Tensor>& tensors, const std::string& json) override;
  // fp32 moments only: low-precision ones take per-tensor scales from the whole tensor.
  void shard(const OwnedRanges& owned) override;
  const StateFormat& state_format() const { return format_; }

  // One moment's rounding into its low-precision storage, seen after a step:
  // the fp32 values before rounding and the stored values decoded, both in
  // the moment's units (scale applied), of the elements 0, stride, 2 stride,
  // ... of the parameter (n of them).
  struct StateCast {
    const autograd::Parameter* param = nullptr;
    const char* moment = "";  // "exp_avg" or "exp_avg_sq"
    DType dtype = DType::f32;
    const float* ref = nullptr;
    const float* q = nullptr;
    int64_t n = 0;
    float scale = 1;
    int64_t stride = 1;
  };
  // Called per parameter and low-precision moment after each step while set
  // (empty: none). With max_values > 0 it sees an even stride of about that
  // many elements per moment (the stride ceil(numel / max_values)), else all:
  // the cost is a copy of the elements seen.
  void set_state_observer(std::function<void(const StateCast&)> f, int64_t max_values = 0) {
    observer_ = std::move(f);
    observer_values_ = max_values;
  }

 private:
  void update_low_precision(const std::vector<detail::AdamScalars>& scalars);
  std::function<void(const StateCast&)> observer_;
  int64_t observer_values_ = 0;

  OptimizerConfig cfg_;
  bool decoupled_;
  StateFormat format_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
};

// Bytes the allocator currently counts for parameters, gradients and
// optimizer state (memory.hpp), i.e. what the training state costs.
struct TrainingStateBytes {
  size_t parameters = 0, gradients = 0, optimizer_state = 0;
  size_t total() const { return parameters + gradients + optimizer_state; }
};
TrainingStateBytes training_state_bytes();

}  // namespace mantissa::optim
