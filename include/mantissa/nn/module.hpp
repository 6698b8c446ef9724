// The Module / Model vocabulary the trainer, optimizers and checkpoints use.
// Models own their parameters; the trainer only sees this interface.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <memory>

#include "mantissa/autograd/parameter.hpp"
#include "mantissa/nn/tasks.hpp"
#include "mantissa/autograd/policy.hpp"
#include "mantissa/autograd/tape.hpp"
#include "mantissa/unit/config.hpp"
#include "mantissa/tensor/tensor.hpp"

namespace mantissa::nn {

// Bounds a model config must keep before any tensor is allocated for it (a
// config.json may come from a stranger): every dimension and the total
// parameter count (2^33 ~ 8.6e9, far above what trains on a CPU).
constexpr int64_t kMaxDimension = int64_t{1} << 24;
constexpr int64_t kMaxParameters = int64_t{1} << 33;
// Throws std::invalid_argument "<model> config: <name> must be in [1, max]".
void check_dimension(const char* model, const char* name, int64_t v, int64_t max = kMaxDimension);
// Throws if n (computed with checked arithmetic) exceeds kMaxParameters.
void check_parameter_total(const char* model, int64_t n);

class Module {
 public:
  virtual ~Module() = default;
  virtual std::vector<autograd::Parameter*> parameters() = 0;
  void zero_grad();
  int64_t parameter_count();
  // The parameter with this exact name, or null (checkpoints, golden tests).
  autograd::Parameter* find(const std::string& name);
};

// One micro-batch. GPT: inputs i32 [B, T] token ids, targets i32 [B, T] with
// -1 = ignored. MLP: inputs f32 [B, features], targets i32 [B] class ids.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

struct LossSum {
  double sum = 0;     // sum of per-target cross-entropy losses (nats), in fp64
  int64_t count = 0;  // number of non-ignored targets
  int64_t correct = 0;  // evaluate() of a masked language model: targets whose arg-max logit is right
};

class Model : public Module {
 public:
  // Forward and backward of one micro-batch: adds to every Parameter::grad
  // the gradient of grad_scale x (sum of per-target losses). The trainer
  // passes loss_scale / (non-ignored targets of the whole optimizer step), so
  // gradient accumulation and loss scaling need nothing else from the model.
  virtual LossSum forward_backward(const Batch& batch, float grad_scale) = 0;
  // Forward only, nothing kept for backward.
  virtual LossSum evaluate(const Batch& batch) = 0;
  // Configuration as saved beside the weights (config.json).
  virtual std::string config_json() const = 0;
  virtual std::string kind() const = 0;  // "gpt", "llama", "bert" or "mlp"

  // Configuration-level facts the rules outside nn/ read.
  using Task = nn::Task;  // tasks.hpp
  virtual Task task() const { return Task::language_model; }
  // Longest input sequence (0: the inputs are not sequences).
  virtual int64_t context_length() const { return 0; }
  // Residual blocks (0: none); parameters inside them carry Parameter::block.
  virtual int64_t blocks() const { return 0; }
  // The unit-scaled parametrisation the model was built with (enabled = false: standard).
  virtual const unit::UnitConfig& unit() const;
  // logits [.., outputs] for the inputs of a batch, nothing recorded.
  virtual Tensor logits(const Tensor& inputs);
  // The prefix of its parameters' names that a file saved from the base model
  // (transformers' GPT2Model, LlamaModel, BertModel: the checkpoints on the
  // hub are often those) leaves out, e.g. "transformer."; "" if none.
  virtual std::string base_prefix() const { return ""; }
  // Why this model, as its config asks, cannot be trained ("": it can), e.g.
  // a loaded config with a training-only setting mantissa does not implement.
  virtual std::string cannot_train() const { return ""; }
  // Sets every dropout rate the model applies to p (a kind whose options
  // include "dropout"; the others refuse).
  virtual void set_dropout(float p);

  // Precision policy of the matrix products and saved activations of every
  // later forward pass (default fp32 everywhere).
  void set_precision(const autograd::PrecisionPolicy& p) { precision_ = p; }
  const autograd::PrecisionPolicy& precision() const { return precision_; }

  // Scale analysis: every later pass reports its named op outputs (backward
  // = false) and the gradients arriving at them (backward = true) here
  // (unit::observe); an empty function turns it off.
  using Observer = std::function<void(const std::string& name, bool backward, const Tensor& value)>;
  void set_observer(Observer o) { observer_ = std::move(o); }

  // The library's models hold their parameters here (in creation order).
  std::vector<autograd::Parameter*> parameters() override;
  // Frees every value derived from the parameters (casts, FP8/FP4 codes, packed copies).
  ~Model() override;
  // What a tape for this model carries: its precision policy, weight-cast
  // cache, observer and (training) the pass's dropout seed.
  autograd::OpContext context(bool training);
  // Bytes held by weight casts for low-precision matmuls.
  size_t cast_cache_bytes() const { return casts_.bytes(); }
  // Activation checkpointing: every k-th block (0, k, 2k, ...) keeps only its
  // input and is recomputed in the backward pass; 0 = off, 1 = every block.
  // Models without it ignore the setting.
  void set_activation_checkpointing(int every) { checkpoint_every_ = every < 0 ? 0 : every; }
  int activation_checkpointing() const { return checkpoint_every_; }

 protected:
  // A zero parameter (value and grad) of this role; decay = decays(role).
  autograd::Parameter* add_parameter(std::string name, const Shape& shape, autograd::Role role, int64_t fan_in, int block = -1);
  // The dropout seed of the next pass (context(training) calls it once per tape).
  virtual uint64_t pass_seed(bool training) {
    (void)training;
    return 0;
  }

  autograd::PrecisionPolicy precision_;
  Observer observer_;
  std::vector<std::unique_ptr<autograd::Parameter>> params_;
  autograd::CastCache casts_;
  int checkpoint_every_ = 0;
};

}  // namespace mantissa::nn
