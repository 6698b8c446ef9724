// Mixed precision for any nn::Model in three lines (apex's amp.initialize,
// scale_loss, step):
//
//   amp::Amp amp(model, optimizer, recipe::find_recipe("fp16-amp"));
//   amp.backward(batch);          // scaled forward + backward, as often as you accumulate
//   amp.step(lr);                 // unscale, skip if non-finite, clip, update, round weights
//
// Amp sets the recipe's precision policy on the model (matmul format, saved
// activations: nn::Model::set_precision; a custom model reads it back with
// precision()) and owns the rest: the loss scaler, the fp32 master weights /
// working-format rounding, the gradient format, and the underflow/overflow
// diagnostics.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mantissa/amp/grad_stats.hpp"
#include "mantissa/amp/loss_scaler.hpp"
#include "mantissa/amp/master_weights.hpp"
#include "mantissa/recipe/recipe.hpp"
#include "mantissa/autograd/policy.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/optim/optimizer.hpp"

namespace mantissa::amp {

// The model-side settings of a recipe. Throws std::invalid_argument naming
// the setting when the engine cannot run a format in that role.
// Scale-propagation recipes (cast_scaling propagate) need the model: their
// scales start from its parameters'; Amp passes it.
autograd::PrecisionPolicy precision_policy(const recipe::Recipe& r, nn::Model* model = nullptr);

struct AmpOptions {
  double grad_clip = 0.0;      // <= 0: measure the norm only
  uint64_t seed = 0;           // stochastic weight rounding stream
  bool grad_stats = false;     // compute underflow/overflow diagnostics each step
};

struct AmpStepResult {
  bool skipped = false;        // non-finite gradient: no update, scale backed off
  double grad_norm = 0.0;      // of the unscaled gradient, before clipping (inf/NaN when skipped)
  double loss_scale = 1.0;     // the scale this step's gradients carried
  std::string grad_stats_json; // when AmpOptions::grad_stats (measured before unscaling)
};

// Number of targets that count in the loss (targets >= 0).
int64_t count_targets(const nn::Batch& b);

class Amp {
 public:
  Amp(nn::Model& model, optim::Optimizer& optimizer, const recipe::Recipe& recipe, AmpOptions options = {});

  const recipe::Recipe& recipe() const { return recipe_; }
  LossScaler& scaler() { return scaler_; }
  const LossScaler& scaler() const { return scaler_; }
  MasterWeights& master_weights() { return master_; }
  const MasterWeights& master_weights() const { return master_; }
  const std::vector<autograd::Parameter*>& parameters() const { return params_; }

  // Scaled forward + backward of one micro-batch. Gradients of all
  // micro-batches of a step add up to loss_scale x d(sum of losses)/total,
  // where total = total_targets: the non-ignored targets of ALL micro-batches
  // of the step (count them first with count_targets). Without it, the
  // batch's own count is used (one micro-batch per step).
  nn::LossSum backward(const nn::Batch& batch, int64_t total_targets);
  nn::LossSum backward(const nn::Batch& batch) { return backward(batch, count_targets(batch)); }

  // Unscale once, check finiteness, clip, optimizer step with lr, round the
  // working weights, advance the scaler, zero the gradients. Returns whether
  // the step was skipped (then the caller must not advance its LR schedule).
  AmpStepResult step(double lr);
  // A copy of p's gradient as step() hands it to clipping and the optimizer
  // (call it between backward and step): rounded into the recipe's gradient
  // format, unscaled.
  std::vector<float> step_gradient(const autograd::Parameter& p) const;

  // Number of updates applied (skipped steps excluded): the stochastic
  // rounding counter. Part of the resumable state.
  int64_t updates() const { return updates_; }
  void set_updates(int64_t n) { updates_ = n; }

  // Sharded optimizer state (ZeRO stage 1; the optimizer is sharded by the
  // caller): step() reads, rounds, unscales and clips only the gradients of
  // the owned elements, updates their masters and rounds their working
  // values; the caller then gathers the other elements' new values. The
  // gradient norm is `total` of this process's chunk sums of squares
  // (optim::scale_grads_chunk_sumsq over the owned ranges): it must add every
  // process's chunk sums in chunk order, so that every process takes the same
  // skip and clipping decision. Refuses (std::invalid_argument) stochastic
  // weight rounding and --grad-stats (a whole-gradient diagnostic).
  using SumOfChunks = std::function<double(const std::vector<double>& mine)>;
  void shard(const optim::OwnedRanges& owned, SumOfChunks total);
  const optim::OwnedRanges* owned() const { return owned_.empty() ? nullptr : &owned_; }

 private:
  void round_gradients();

  nn::Model& model_;
  optim::Optimizer& optimizer_;
  recipe::Recipe recipe_;
  AmpOptions options_;
  std::vector<autograd::Parameter*> params_;
  LossScaler scaler_;
  MasterWeights master_;
  formats::Format grad_format_;
  formats::Format stats_format_;
  bool low_gradients_;
  std::string pending_stats_;
  int64_t updates_ = 0;
  optim::OwnedRanges owned_;  // empty: not sharded
  SumOfChunks total_;
};

}  // namespace mantissa::amp
