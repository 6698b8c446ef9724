// The training loop for any nn::Model: K micro-batches per optimizer step,
// a recipe's mixed precision (amp::Amp), the LR schedule (advanced only by
// applied updates: a skipped step does not move it), evaluation, metrics,
// and checkpoints that resume bit-identically.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mantissa/amp/amp.hpp"
#include "mantissa/data/source.hpp"
#include "mantissa/dist/reduce.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/optim/schedule.hpp"

namespace mantissa::train {

struct TrainerOptions {
  int64_t grad_accum = 1;
  optim::LrSchedule schedule;
  amp::AmpOptions amp;  // grad_clip, seed (stochastic rounding), grad_stats
  // Fault injection for tests: called in every step (1-based) before the
  // forward passes (after_backward false) and before the update (true).
  std::function<void(int64_t step, bool after_backward)> fault_hook;
  // Data parallel (null or one process: none). Each rank draws every global
  // batch and trains on its rows (dist::rank_rows); gradients are summed in
  // rank order (dist::GradReducer); only rank 0 writes checkpoints.
  dist::Group* group = nullptr;
  dist::CommOptions comm;
  // ZeRO stage 1 over the group: each rank keeps the optimizer state and
  // master weights of its chunk of the parameters, updates it and
  // all-gathers the new weights (dist/reduce.hpp). Checkpoints hold the
  // whole state, as unsharded ones, so any number of ranks resumes them.
  bool shard_optimizer = false;
};

struct StepMetrics {
  int64_t step = 0;       // steps done, this one included (1-based)
  double loss = 0;        // mean loss per target over the step's micro-batches (nats)
  double lr = 0;          // the learning rate applied (or that would have been)
  int64_t tokens = 0;     // input tokens (or examples) in the step
  int64_t targets = 0;    // non-ignored targets in the step
  double seconds = 0;     // wall time of the step
  double tokens_per_s = 0;
  double loss_scale = 1;
  bool skipped = false;
  double grad_norm = 0;
  std::string grad_stats_json;
  int ranks = 1;
  double comm_seconds = 0;  // gradient reduction (encode, collectives, decode) and weight all-gather
  int64_t comm_bytes = 0;   // sent by this rank
  int64_t state_bytes = 0;  // optimizer state + separate master weights held by this rank
};

struct EvalMetrics {
  int64_t step = 0;
  double val_loss = 0;  // nats per target
  double val_bpc = 0;   // val_loss / ln 2 (bits per character for byte-level text)
  int64_t targets = 0;
  double masked_accuracy = -1;  // masked language model: fraction of targets predicted right (else -1)
};

class Trainer {
 public:
  // val may be null (no evaluation). Objects must outlive the trainer.
  Trainer(nn::Model& model, optim::Optimizer& optimizer, data::TrainSource& train, const data::EvalSource* val,
          const recipe::Recipe& recipe, TrainerOptions options);

  // One optimizer step on the next micro-batches at the schedule's rate.
  StepMetrics train_step();
  // The same step on micro-batches the caller drew (next_batches(); whole
  // global batches: each rank trains on its rows) at rate lr, so that the
  // same batches can train another model too (the inspector's fp32 shadow).
  // before_update, when set, runs after the backward passes and the
  // gradient reduction, just before amp().step(lr).
  StepMetrics train_step(const std::vector<nn::Batch>& micro, double lr, const std::function<void()>& before_update = {});
  // The next step's micro-batches (grad_accum global batches) and the rate
  // the schedule gives it.
  std::vector<nn::Batch> next_batches();
  double next_lr() const { return options_.schedule.at(amp_.updates()); }
  EvalMetrics evaluate() const;

  int64_t step() const { return step_; }
  bool has_validation() const { return val_ != nullptr; }
  int64_t tokens_seen() const { return tokens_seen_; }
  amp::Amp& amp() { return amp_; }
  const amp::Amp& amp() const { return amp_; }
  nn::Model& model() { return model_; }
  const TrainerOptions& options() const { return options_; }
  void set_fault_hook(std::function<void(int64_t, bool)> hook) { options_.fault_hook = std::move(hook); }

  // Resumable state besides the tensors: step, update count, loss scaler,
  // data position; the recipe and model configuration for a compatibility check.
  std::string state_json() const;
  void load_state_json(const std::string& json);

  // Checkpoint: model, optimizer state, master weights, and state_json().
  void save(const std::string& dir);
  // Loads a checkpoint written by save(); throws std::invalid_argument
  // naming what does not match (model configuration, recipe, tensors).
  void resume(const std::string& dir);
  // The first tensor (parameter, optimizer state, master copy) holding a NaN
  // or an infinity, or a non-positive scale, by name; empty if all are finite.
  std::string non_finite_state();

  // The data-parallel gradient reduction (null in one process).
  dist::GradReducer* reducer() { return reducer_.get(); }
  // True when the optimizer state is sharded across ranks.
  bool sharded() const { return reducer_ && reducer_->sharded(); }
  // Bytes of optimizer state and separate master weights this process holds
  // (sharded: its chunk's; about 1/ranks of the unsharded figure).
  int64_t state_bytes() const;

 private:
  // train_step on global batches, its time counted from t0.
  StepMetrics step_on(const std::vector<nn::Batch>& global, double lr, const std::function<void()>& before_update,
                      std::chrono::steady_clock::time_point t0);
  // Moves micro-batch k's gradient (of `count`) into the step's running sum
  // and leaves the gradients zero, or the sum after the last one.
  void accumulate(size_t k, size_t count);

  nn::Model& model_;
  optim::Optimizer& optimizer_;
  data::TrainSource& train_;
  const data::EvalSource* val_;
  TrainerOptions options_;
  amp::Amp amp_;
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;

  // The whole optimizer state and master copies (sharded: gathered from
  // every rank, a collective call) as a checkpoint holds them.
  std::map<std::string, Tensor> whole_optimizer_state();
  std::map<std::string, Tensor> master_tensors();
  // Every rank's error-feedback residuals for the checkpoint (collective),
  // and their restoration on resume when the job's layout matches.
  void add_feedback_tensors(std::map<std::string, Tensor>& extra);
  void restore_feedback(const std::map<std::string, Tensor>& extra, const std::string& state_json);
  std::string feedback_json() const;
  std::unique_ptr<dist::GradReducer> reducer_;  // data parallel only
  std::vector<Tensor> accum_;                   // grad_accum > 1: the step's running sum
};

}  // namespace mantissa::train
