#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "mantissa/optim/optimizer.hpp"
#include "optim/adam_kernel.hpp"
#include "optim/fused_loop.hpp"
#include "mantissa/io/untrusted.hpp"

namespace mantissa::optim {

using detail::AdamScalars;
using detail::adam_chunk;


Adam::Adam(std::vector<autograd::Parameter*> params, const OptimizerConfig& config, bool decoupled)
    : Optimizer(std::move(params)), cfg_(config), decoupled_(decoupled), format_(config.state_format) {
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
  if (!config.owned.empty()) {
    shard(config.owned);  // allocates the share only
    return;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    exp_avg_[i] = Tensor::zeros(state_shape(i), format_.m, MemoryKind::optimizer_state);
    exp_avg_sq_[i] = Tensor::zeros(state_shape(i), format_.v, MemoryKind::optimizer_state);
  }
}

void Adam::step(double lr) {
  const int64_t t = steps_ + 1;
  const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(t));
  // Per-parameter scalars, computed in double once (as PyTorch does in Python).
  std::vector<AdamScalars> scalars(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const double plr = lr * lr_mult_[i];
    const double wd = params_[i]->decay ? cfg_.weight_decay : 0.0;
    AdamScalars& s = scalars[i];
    s.decay_factor = decoupled_ ? static_cast<float>(1.0 - plr * wd) : 1.0f;
    s.l2 = decoupled_ ? 0.0f : static_cast<float>(wd);
    s.one_minus_b1 = static_cast<float>(1.0 - cfg_.beta1);
    s.b2 = static_cast<float>(cfg_.beta2);
    s.one_minus_b2 = static_cast<float>(1.0 - cfg_.beta2);
    s.step_size = static_cast<float>(plr / bc1);
    s.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2));
    s.eps = static_cast<float>(cfg_.eps);
  }
  if (!format_.is_fp32()) {
    update_low_precision(scalars);
    for (autograd::Parameter* p : params_) ++p->version;
    steps_ = t;
    return;
  }
  const auto spans = detail::make_spans(params_, false, owned());
  const auto n_spans = static_cast<int64_t>(spans.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n_spans; ++k) {
    const detail::Span& sp = spans[static_cast<size_t>(k)];
    autograd::Parameter& prm = *params_[sp.param];
    const int64_t at = sp.begin - state_begin(sp.param);  // the state holds the owned elements only
    adam_chunk(prm.value.f32() + sp.begin, prm.grad.f32() + sp.begin, exp_avg_[sp.param].f32() + at,
               exp_avg_sq_[sp.param].f32() + at, sp.end - sp.begin, scalars[sp.param]);
  }
  for (autograd::Parameter* p : params_) ++p->version;
  steps_ = t;
}

void Adam::shard(const OwnedRanges& owned) {
  if (!format_.is_fp32())
    throw std::invalid_argument("the optimizer state cannot be sharded with moments in " + state_format_name(format_) +
                                " (their per-tensor scales come from whole tensors): use fp32 moments");
  Optimizer::shard(owned);
  for (size_t i = 0; i < params_.size(); ++i) {
    exp_avg_[i] = Tensor::zeros(state_shape(i), format_.m, MemoryKind::optimizer_state);
    exp_avg_sq_[i] = Tensor::zeros(state_shape(i), format_.v, MemoryKind::optimizer_state);
  }
}

std::map<std::string, Tensor> Adam::state_tensors() const {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace(params_[i]->name + ".exp_avg", exp_avg_[i]);
    out.emplace(params_[i]->name + ".exp_avg_sq", exp_avg_sq_[i]);
  }
  return out;
}

std::string Adam::state_json() const {
  return nlohmann::json{{"type", type()},
                        {"step", steps_},
                        {"beta1", cfg_.beta1},
                        {"beta2", cfg_.beta2},
                        {"eps", cfg_.eps},
                        {"weight_decay", cfg_.weight_decay},
                        {"state_format", state_format_name(format_)}}
      .dump();
}

void Adam::load_state(const std::map<std::string, Tensor>& tensors, const std::string& json) {
  // Restore into copies first so a refused state leaves the optimizer as it was.
  std::vector<Tensor> m = exp_avg_, v = exp_avg_sq_;
  for (size_t i = 0; i < params_.size(); ++i) {
    restore_tensor(tensors, params_[i]->name + ".exp_avg", m[i]);
    restore_tensor(tensors, params_[i]->name + ".exp_avg_sq", v[i], StateRange::non_negative);
  }
  // Older checkpoints have no "state_format": their moments are fp32, which
  // restore_tensor's dtype check already enforces.
  const auto j = io::parse_json(json, "optimizer state");
  if (j.is_object() && j.contains("state_format") && j["state_format"].is_string() &&
      j["state_format"].get<std::string>() != state_format_name(format_))
    throw std::invalid_argument("optimizer state has moments in '" + j["state_format"].get<std::string>() +
                                "' but the optimizer stores them in '" + state_format_name(format_) + "'");
  restore_common(json);
  exp_avg_ = std::move(m);
  exp_avg_sq_ = std::move(v);
}

}  // namespace mantissa::optim
