// Working weights in a low format, simulated exactly in fp32 storage.
//
// With master_format "fp32" the optimizer must update an fp32 master copy
// while the model computes with the rounded copy: MasterWeights keeps the
// masters, and around each optimizer step swaps them in (before_update) and
// rounds them back into Parameter::value (after_update). With master_format
// "none" (pure 16-bit training) there is no master: after each update the
// value itself is re-rounded, so an update smaller than half an ulp is lost
// exactly as it would be with real 16-bit weights.
//
// Rounding is nearest-even, or stochastic with a per-(seed, step, parameter)
// stream, so a resumed run rounds identically to an uninterrupted one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mantissa/recipe/recipe.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/optim/owned.hpp"

namespace mantissa::amp {

class MasterWeights {
 public:
  MasterWeights(std::vector<autograd::Parameter*> params, const recipe::Recipe& recipe, uint64_t seed);

  // False for fp32 working weights: every call below is then a no-op.
  bool active() const { return active_; }
  bool has_master() const { return has_master_; }
  const formats::Format& working_format() const { return format_; }
  uint64_t seed() const { return seed_; }

  // Call once after initialisation (or after loading fp32 weights): takes the
  // fp32 values as masters and rounds the working copies.
  void initialise();
  // Optimizer step protocol: before_update(); optimizer.step(); after_update(step).
  void before_update();
  void after_update(int64_t step);

  // Master copies by parameter name, for checkpoints (empty without masters).
  std::map<std::string, const float*> masters() const;
  // The same as tensors sharing the masters' storage (sharded: 1-D, the
  // owned elements only).
  std::map<std::string, Tensor> master_tensors() const;
  // Restores masters from a checkpoint (by name, the whole parameter's n
  // values, also when sharded) and re-derives nothing: the working values
  // are loaded separately.
  void load_master(const std::string& name, const float* data, int64_t n);

  // Sharded (ZeRO stage 1): keeps the masters of, and rounds, only elements
  // owned[i] of parameter i. Call after initialise(). Stochastic rounding is
  // refused (its random draw is indexed from the start of the whole tensor).
  void shard(const optim::OwnedRanges& owned);
  // Bytes of the master copies held (0 without masters).
  size_t bytes() const;

 private:
  bool rounds(size_t i) const;
  void round_into_value(size_t i, uint64_t round_seed);

  std::vector<autograd::Parameter*> params_;
  std::vector<Tensor> master_;  // fp32; undefined unless has_master_ and rounds(i)
  optim::OwnedRanges owned_;    // empty: not sharded
  formats::Format format_;
  recipe::WeightRounding rounding_;
  bool norms_fp32_;
  bool active_;
  bool has_master_;
  uint64_t seed_;
};

}  // namespace mantissa::amp
