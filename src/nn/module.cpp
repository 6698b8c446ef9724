#include "mantissa/nn/module.hpp"

#include <stdexcept>
#include <string>

#include "mantissa/tensor/derived_cache.hpp"

namespace mantissa::nn {

void Module::zero_grad() {
  for (autograd::Parameter* p : parameters())
    if (p->grad.defined()) p->grad.zero_();
}

void check_dimension(const char* model, const char* name, int64_t v, int64_t max) {
  if (v <= 0 || v > max)
    throw std::invalid_argument(std::string(model) + " config: " + name + " must be in [1, " + std::to_string(max) +
                                "], got " + std::to_string(v));
}

void check_parameter_total(const char* model, int64_t n) {
  if (n > kMaxParameters)
    throw std::invalid_argument(std::string(model) + " config: " + std::to_string(n) + " parameters, more than the " +
                                std::to_string(kMaxParameters) + " mantissa accepts");
}

int64_t Module::parameter_count() {
  int64_t n = 0;
  for (autograd::Parameter* p : parameters()) n += p->value.numel();
  return n;
}

autograd::Parameter* Module::find(const std::string& name) {
  for (autograd::Parameter* p : parameters())
    if (p->name == name) return p;
  return nullptr;
}

const unit::UnitConfig& Model::unit() const {
  static const unit::UnitConfig standard;
  return standard;
}

Tensor Model::logits(const Tensor&) { throw std::logic_error(kind() + " model: logits are not offered"); }

void Model::set_dropout(float) { throw std::invalid_argument(kind() + " model: it applies no dropout to set"); }

std::vector<autograd::Parameter*> Model::parameters() {
  std::vector<autograd::Parameter*> out;
  out.reserve(params_.size());
  for (auto& p : params_) out.push_back(p.get());
  return out;
}

Model::~Model() {
  for (auto& p : params_) derived_cache().forget_source(p.get());
}

autograd::OpContext Model::context(bool training) {
  autograd::OpContext ctx;
  ctx.policy = precision_;
  ctx.casts = &casts_;
  ctx.training = training;
  ctx.observer = observer_;
  ctx.seed = pass_seed(training);
  return ctx;
}

autograd::Parameter* Model::add_parameter(std::string name, const Shape& shape, autograd::Role role, int64_t fan_in, int block) {
  auto p = std::make_unique<autograd::Parameter>();
  p->name = std::move(name);
  p->value = Tensor::zeros(shape, DType::f32, MemoryKind::parameter);
  p->grad = Tensor::zeros(shape, DType::f32, MemoryKind::gradient);
  p->role = role;
  p->decay = autograd::decays(role);
  p->fan_in = fan_in;
  p->block = block;
  params_.push_back(std::move(p));
  return params_.back().get();
}

}  // namespace mantissa::nn
