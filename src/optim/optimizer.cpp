#include "mantissa/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <vector>

#include "mantissa/formats/convert.hpp"
#include "mantissa/io/untrusted.hpp"
#include "optim/state_chunk.hpp"

namespace mantissa::optim {

namespace {
// A tied weight (e.g. a head sharing the embedding's storage) is updated once,
// as PyTorch's parameters() yields a shared tensor once: updating it twice would
// apply the step twice, and two threads would race on the same memory.
std::vector<autograd::Parameter*> without_tied(std::vector<autograd::Parameter*> params) {
  // The same Parameter listed twice is kept, so the duplicate-name check refuses it.
  std::vector<autograd::Parameter*> kept;
  for (autograd::Parameter* p : params) {
    if (!p) throw std::invalid_argument("optimizer: null parameter");
    bool tied = false;
    for (const autograd::Parameter* q : kept)
      tied = tied || (p != q && p->value.defined() && p->value.same_storage(q->value));
    if (!tied) kept.push_back(p);
  }
  return kept;
}
}  // namespace

Optimizer::Optimizer(std::vector<autograd::Parameter*> params) : params_(without_tied(std::move(params))) {
  std::set<std::string> names;
  for (const autograd::Parameter* p : params_) {
    if (!p->value.defined() || p->value.dtype() != DType::f32)
      throw std::invalid_argument("optimizer: parameter '" + p->name + "' needs an fp32 value tensor");
    if (!p->grad.defined() || p->grad.dtype() != DType::f32 || p->grad.shape() != p->value.shape())
      throw std::invalid_argument("optimizer: parameter '" + p->name + "' needs an fp32 grad of shape " +
                                  shape_str(p->value.shape()));
    // State tensors are keyed by name, so names must identify parameters.
    if (!names.insert(p->name).second)
      throw std::invalid_argument("optimizer: duplicate parameter name '" + p->name + "'");
  }
  lr_mult_.assign(params_.size(), 1.0);
}

void Optimizer::set_lr_multiplier(size_t index, double multiplier) {
  if (index >= params_.size()) throw std::out_of_range("optimizer: no parameter #" + std::to_string(index));
  if (!std::isfinite(multiplier) || multiplier < 0)
    throw std::invalid_argument("optimizer: learning-rate multiplier of '" + params_[index]->name +
                                "' must be finite and >= 0");
  lr_mult_[index] = multiplier;
}

void Optimizer::set_lr_multipliers(const std::function<double(const autograd::Parameter&)>& rule) {
  for (size_t i = 0; i < params_.size(); ++i) set_lr_multiplier(i, rule(*params_[i]));
}

std::string Optimizer::state_json() const {
  return nlohmann::json{{"type", type()}, {"step", steps_}}.dump();
}

void Optimizer::restore_common(const std::string& json) {
  const nlohmann::json j = io::parse_json(json, "optimizer state");
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string() || !j.contains("step") ||
      !j["step"].is_number_integer())
    throw std::invalid_argument("optimizer state: JSON needs string 'type' and integer 'step'");
  if (j["type"].get<std::string>() != type())
    throw std::invalid_argument("optimizer state is for '" + j["type"].get<std::string>() + "' but the optimizer is '" +
                                type() + "'");
  auto step = j["step"].get<int64_t>();
  if (step < 0) throw std::invalid_argument("optimizer state: negative step " + std::to_string(step));
  steps_ = step;
}

void Optimizer::load_state(const std::map<std::string, Tensor>&, const std::string& json) { restore_common(json); }

void Optimizer::shard(const OwnedRanges& owned) {
  if (owned.size() != params_.size())
    throw std::invalid_argument("optimizer: " + std::to_string(owned.size()) + " owned ranges for " +
                                std::to_string(params_.size()) + " parameters");
  if (steps_ != 0) throw std::logic_error("optimizer: shard() must come before the first step");
  for (size_t i = 0; i < owned.size(); ++i)
    if (owned[i].begin < 0 || owned[i].begin > owned[i].end || owned[i].end > params_[i]->value.numel())
      throw std::invalid_argument("optimizer: owned range [" + std::to_string(owned[i].begin) + ", " +
                                  std::to_string(owned[i].end) + ") is outside parameter '" + params_[i]->name + "'");
  owned_ = owned;
}

Shape Optimizer::state_shape(size_t i) const {
  return owned_.empty() ? params_[i]->value.shape() : Shape{owned_[i].size()};
}

void Optimizer::restore_tensor(const std::map<std::string, Tensor>& tensors, const std::string& name, Tensor& dst,
                               StateRange range) {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw std::invalid_argument("optimizer state: tensor '" + name + "' is missing");
  const Tensor& src = it->second;
  if (src.dtype() != dst.dtype() || src.shape() != dst.shape())
    throw std::invalid_argument("optimizer state: tensor '" + name + "' is " + dtype_name(src.dtype()) + " " +
                                shape_str(src.shape()) + " but " + dtype_name(dst.dtype()) + " " +
                                shape_str(dst.shape()) + " is expected");
  check_state_values(src, name, range);
  dst = src.clone(MemoryKind::optimizer_state);
}

void Optimizer::check_state_values(const Tensor& t, const std::string& name, StateRange range) {
  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument("optimizer state: tensor '" + name + "' " + what);
  };
  // A scaled state holds codes x a power-of-two scale whose largest value must
  // stay finite in float32 (the update divides by the scale exactly).
  const float scale = t.scale();
  int e = 0;
  if (!(scale > 0.0f) || !std::isfinite(scale) || std::frexp(scale, &e) != 0.5f)
    fail("has scale " + io::excerpt_json(scale) + " (must be a positive, finite power of two)");
  const bool plain = t.dtype() == DType::f32;
  if (!plain && !std::isfinite(static_cast<float>(formats::preset(dtype_format_name(t.dtype())).max() *
                                                  static_cast<double>(scale))))
    fail("has scale " + io::excerpt_json(scale) + ": its largest value overflows float32");
  constexpr int64_t kChunk = 4096;
  std::vector<float> buf(kChunk);
  for (int64_t begin = 0; begin < t.numel(); begin += kChunk) {
    const int64_t n = std::min(kChunk, t.numel() - begin);
    detail::load_chunk(t, begin, n, buf.data());  // codes x scale; fp32 as stored
    for (int64_t i = 0; i < n; ++i) {
      const float x = plain ? buf[static_cast<size_t>(i)] * scale : buf[static_cast<size_t>(i)];
      if (!std::isfinite(x)) fail("holds non-finite values (at element " + std::to_string(begin + i) + ")");
      if (range == StateRange::non_negative && x < 0.0f)
        fail("holds " + io::excerpt_json(x) + " at element " + std::to_string(begin + i) + " (must be >= 0)");
    }
  }
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<autograd::Parameter*> params) {
  auto check = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("optimizer: " + what);
  };
  check(std::isfinite(c.weight_decay) && c.weight_decay >= 0, "weight_decay must be >= 0");
  if (c.type == "sgd") {
    check(std::isfinite(c.momentum) && c.momentum >= 0, "momentum must be >= 0");
    check(std::isfinite(c.dampening) && c.dampening >= 0 && c.dampening <= 1, "dampening must be in [0, 1]");
    check(!c.nesterov || (c.momentum > 0 && c.dampening == 0), "nesterov needs momentum > 0 and dampening 0");
    return std::make_unique<SGD>(std::move(params), c);
  }
  if (c.type == "adam" || c.type == "adamw") {
    check(c.beta1 >= 0 && c.beta1 < 1, "beta1 must be in [0, 1)");
    check(c.beta2 >= 0 && c.beta2 < 1, "beta2 must be in [0, 1)");
    check(std::isfinite(c.eps) && c.eps >= 0, "eps must be >= 0");
    return std::make_unique<Adam>(std::move(params), c, c.type == "adamw");
  }
  throw std::invalid_argument("unknown optimizer '" + c.type + "' (valid: sgd, adam, adamw)");
}

}  // namespace mantissa::optim
