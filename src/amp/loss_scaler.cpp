#include "mantissa/amp/loss_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mantissa/optim/clip.hpp"
#include "mantissa/io/untrusted.hpp"

namespace mantissa::amp {

LossScaler::LossScaler(const recipe::LossScaleConfig& config) : config_(config) {
  scale_ = config_.method == recipe::ScalingMethod::none ? 1.0 : config_.init_scale;
  if (!(scale_ > 0) || !std::isfinite(scale_)) throw std::invalid_argument("loss scale must be positive and finite");
}

bool LossScaler::unscale_and_check(const std::vector<autograd::Parameter*>& params) const {
  return std::isfinite(unscale_sumsq(params));
}

double LossScaler::unscale_sumsq(const std::vector<autograd::Parameter*>& params) const {
  // fp32 reciprocal as GradScaler does; scales are powers of two in practice,
  // which makes the unscale exact.
  return optim::scale_grads_sumsq(params, unscale_factor());
}

void LossScaler::update(bool found_inf) {
  if (found_inf) ++skipped_;
  if (config_.method != recipe::ScalingMethod::dynamic) return;
  if (found_inf) {
    scale_ *= config_.backoff_factor;
    if (config_.min_scale > 0) scale_ = std::max(scale_, config_.min_scale);
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ >= config_.growth_interval) {
    const double grown = scale_ * config_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;
    if (config_.max_scale > 0) scale_ = std::min(scale_, config_.max_scale);
    growth_tracker_ = 0;
  }
}

std::string LossScaler::state_json() const {
  nlohmann::json j = {{"method", scaling_name(config_.method)},
                      {"scale", scale_},
                      {"growth_tracker", growth_tracker_},
                      {"skipped_steps", skipped_},
                      {"init_scale", config_.init_scale},
                      {"growth_factor", config_.growth_factor},
                      {"backoff_factor", config_.backoff_factor},
                      {"growth_interval", config_.growth_interval},
                      {"min_scale", config_.min_scale},
                      {"max_scale", config_.max_scale}};
  return j.dump();
}

void LossScaler::load_state_json(const std::string& text) {
  try {
    const auto j = io::parse_json(text, "loss scaler state");
    const std::string method = j.at("method").get<std::string>();
    if (method != scaling_name(config_.method))
      throw std::invalid_argument("saved loss scaling is '" + method + "' but this run uses '" +
                                  scaling_name(config_.method) + "'");
    const double scale = j.at("scale").get<double>();
    // The scale and its reciprocal are applied in float32: both must be finite
    // and normal there. A run's own clamp then applies as at every update.
    if (!(scale >= 0x1p-126 && scale <= 0x1p126))
      throw std::invalid_argument("saved loss scale " + io::excerpt_json(scale) + " is outside [2^-126, 2^126]");
    const auto tracker = j.at("growth_tracker").get<int64_t>(), skipped = j.at("skipped_steps").get<int64_t>();
    if (tracker < 0 || skipped < 0) throw std::invalid_argument("saved loss scaler counters are negative");
    scale_ = scale;
    if (config_.min_scale > 0) scale_ = std::max(scale_, config_.min_scale);
    if (config_.max_scale > 0) scale_ = std::min(scale_, config_.max_scale);
    growth_tracker_ = tracker;
    skipped_ = skipped;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("loss scaler state: ") + e.what());
  }
}

}  // namespace mantissa::amp
