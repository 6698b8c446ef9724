#include "mantissa/optim/unit_lr.hpp"

#include <map>

#include "mantissa/unit/config.hpp"

namespace mantissa::optim {

unit::ParamRole unit_param_role(const autograd::Parameter& p) {
  switch (p.role) {
    case autograd::Role::readout: return unit::ParamRole::output;
    case autograd::Role::bias: return unit::ParamRole::bias;
    case autograd::Role::norm_gain:
    case autograd::Role::norm_bias: return unit::ParamRole::norm;
    case autograd::Role::token_embedding:
    case autograd::Role::position_embedding:
    case autograd::Role::weight: break;
  }
  return unit::ParamRole::weight;
}

std::optional<int> unit_param_depth(const autograd::Parameter& p, int64_t blocks) {
  if (p.block >= 0 && blocks > 0) return static_cast<int>(blocks);
  return std::nullopt;
}

namespace {

// The forward scale (GEMM alpha) of the unit linear whose weight is w
// [fan_in, fan_out], from the same rule the model applies (the readout uses
// linear_readout).
double unit_linear_forward_scale(const unit::UnitConfig& u, const autograd::Parameter& w) {
  const int64_t fan_in = w.fan_in, fan_out = w.value.numel() / w.fan_in;
  if (w.role == autograd::Role::readout) return unit::linear_readout(fan_in, fan_out, 1, u.rules("readout")).fwd;
  return unit::linear(fan_in, fan_out, 1, u.rules("linear")).fwd;
}

}  // namespace

void set_unit_lr_multipliers(nn::Model& model, Optimizer& opt, const std::string& optimizer) {
  const auto kind = optimizer == "sgd" ? unit::OptimizerKind::sgd : unit::OptimizerKind::adam;
  std::map<const autograd::Parameter*, const autograd::Parameter*> linear_of;  // bias -> the weight it follows
  for (const autograd::Parameter* q : model.parameters())
    if (q->bias && !autograd::is_norm(q->role)) linear_of[q->bias] = q;
  opt.set_lr_multipliers([&](const autograd::Parameter& p) {
    // lr_scale reads PyTorch shapes: [out, in] for linear weights and the
    // readout ([numel / fan_in, fan_in] whatever the stored layout), tables as stored.
    Shape shape = p.value.shape();
    if (shape.size() == 2 && p.role != autograd::Role::position_embedding) shape = {p.value.numel() / p.fan_in, p.fan_in};
    const unit::ParamRole role = unit_param_role(p);
    double mult = unit::lr_scale(kind, role, shape, unit_param_depth(p, model.blocks()));
    // The library scales a linear's bias forward with its output (alpha (xW + b));
    // our kernels add the bias after the GEMM alpha, so the same Adam step moves
    // the output 1/alpha times further (16x at d_model 256, the whole learning
    // rate per step). Multiplying the bias's LR by alpha gives the library's
    // dynamics exactly under Adam (its update does not see gradient scale).
    if (role == unit::ParamRole::bias && kind == unit::OptimizerKind::adam) {
      const auto w = linear_of.find(&p);
      if (w != linear_of.end() && w->second->value.ndim() == 2) mult *= unit_linear_forward_scale(model.unit(), *w->second);
    }
    return mult;
  });
}

}  // namespace mantissa::optim
