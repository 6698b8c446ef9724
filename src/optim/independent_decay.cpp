#include "mantissa/optim/independent_decay.hpp"

#include <stdexcept>

namespace mantissa::optim {

IndependentDecay::IndependentDecay(std::unique_ptr<Optimizer> inner, double base_lr, double decay)
    : Optimizer(inner->parameters()), inner_(std::move(inner)), base_lr_(base_lr), decay_(decay) {
  if (!(base_lr_ > 0)) throw std::invalid_argument("independent weight decay needs a positive base learning rate");
  for (size_t i = 0; i < params_.size(); ++i) lr_mult_[i] = inner_->lr_multiplier(i);
}

void IndependentDecay::step(double lr) {
  inner_->step(lr);
  steps_ = inner_->step_count();
  const float keep = static_cast<float>(1.0 - lr / base_lr_ * decay_);
  if (decay_ == 0.0) return;
  for (size_t k = 0; k < params_.size(); ++k) {
    autograd::Parameter* p = params_[k];
    if (!p->decay) continue;
    // Sharded: the owned elements only (the others arrive from their owners).
    const int64_t first = owned_.empty() ? 0 : owned_[k].begin, n = owned_.empty() ? p->value.numel() : owned_[k].end;
    float* v = p->value.f32();
#pragma omp parallel for schedule(static) if (n - first > 65536)
    for (int64_t i = first; i < n; ++i) v[i] *= keep;
  }
}

void IndependentDecay::shard(const OwnedRanges& owned) {
  inner_->shard(owned);
  Optimizer::shard(owned);
}

void IndependentDecay::load_state(const std::map<std::string, Tensor>& tensors, const std::string& json) {
  inner_->load_state(tensors, json);
  steps_ = inner_->step_count();
}

}  // namespace mantissa::optim
