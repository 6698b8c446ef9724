// u-muP's per-parameter learning-rate multipliers (unit::lr_scale) on an
// optimizer over a unit-scaled model's parameters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mantissa/nn/module.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/unit/rules.hpp"

namespace mantissa::optim {

// The u-muP role of a parameter (from autograd::Role): the readout is `output`,
// other matrices (embeddings, linears) `weight`, norm gains/shifts `norm`,
// linear biases `bias`.
unit::ParamRole unit_param_role(const autograd::Parameter& p);
// Residual depth of a parameter inside the blocks (the model's number of
// blocks), nullopt outside the trunk.
std::optional<int> unit_param_depth(const autograd::Parameter& p, int64_t blocks);

// Sets unit::lr_scale's multiplier on every parameter of `model` in `opt`,
// for the optimizer named `optimizer` ("sgd"; anything else: Adam's rules).
void set_unit_lr_multipliers(nn::Model& model, Optimizer& opt, const std::string& optimizer);

}  // namespace mantissa::optim
