#include <nlohmann/json.hpp>

#include "mantissa/optim/optimizer.hpp"
#include "optim/fused_loop.hpp"

namespace mantissa::optim {

namespace {

// One chunk of torch.optim.SGD (foreach=False) in fp32; `first` is PyTorch's
// "momentum_buffer is None" (the buffer starts as a copy of d, undamped).
__attribute__((target_clones("avx512f", "default")))
void sgd_chunk(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n, float lr,
               float wd, float momentum, float one_minus_dampening, bool nesterov, bool first) {
  if (!buf) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i] + wd * p[i];
    float b = first ? d : momentum * buf[i] + one_minus_dampening * d;
    buf[i] = b;
    float u = nesterov ? d + momentum * b : b;
    p[i] -= lr * u;
  }
}

}  // namespace

SGD::SGD(std::vector<autograd::Parameter*> params, const OptimizerConfig& config)
    : Optimizer(std::move(params)), cfg_(config) {
  if (cfg_.momentum != 0) momentum_.resize(params_.size());
  if (!config.owned.empty()) Optimizer::shard(config.owned);
  for (size_t i = 0; i < momentum_.size(); ++i)
    momentum_[i] = Tensor::zeros(state_shape(i), DType::f32, MemoryKind::optimizer_state);
}

void SGD::step(double lr) {
  const auto spans = detail::make_spans(params_, false, owned());
  const bool first = steps_ == 0;
  const auto n_spans = static_cast<int64_t>(spans.size());
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < n_spans; ++s) {
    const detail::Span& sp = spans[static_cast<size_t>(s)];
    autograd::Parameter& prm = *params_[sp.param];
    float* buf = momentum_.empty() ? nullptr : momentum_[sp.param].f32() + (sp.begin - state_begin(sp.param));
    const double wd = prm.decay ? cfg_.weight_decay : 0.0;
    sgd_chunk(prm.value.f32() + sp.begin, prm.grad.f32() + sp.begin, buf, sp.end - sp.begin,
              static_cast<float>(lr * lr_mult_[sp.param]), static_cast<float>(wd),
              static_cast<float>(cfg_.momentum), static_cast<float>(1.0 - cfg_.dampening), cfg_.nesterov, first);
  }
  for (autograd::Parameter* p : params_) ++p->version;
  ++steps_;
}

void SGD::shard(const OwnedRanges& owned) {
  Optimizer::shard(owned);
  for (size_t i = 0; i < momentum_.size(); ++i)
    momentum_[i] = Tensor::zeros(state_shape(i), DType::f32, MemoryKind::optimizer_state);
}

std::map<std::string, Tensor> SGD::state_tensors() const {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < momentum_.size(); ++i) out.emplace(params_[i]->name + ".momentum_buffer", momentum_[i]);
  return out;
}

std::string SGD::state_json() const {
  return nlohmann::json{{"type", type()},
                        {"step", steps_},
                        {"momentum", cfg_.momentum},
                        {"dampening", cfg_.dampening},
                        {"nesterov", cfg_.nesterov},
                        {"weight_decay", cfg_.weight_decay}}
      .dump();
}

void SGD::load_state(const std::map<std::string, Tensor>& tensors, const std::string& json) {
  std::vector<Tensor> restored = momentum_;
  for (size_t i = 0; i < restored.size(); ++i) restore_tensor(tensors, params_[i]->name + ".momentum_buffer", restored[i]);
  restore_common(json);
  momentum_ = std::move(restored);
}

}  // namespace mantissa::optim
