#include <immintrin.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "mantissa/optim/optimizer.hpp"
#include "optim/fused_loop.hpp"

namespace mantissa::optim {

namespace {

struct AdamScalars {
  float decay_factor;   // AdamW: 1 - lr*wd (1 when not decoupled or no decay)
  float l2;             // Adam: wd added to the gradient (0 for AdamW)
  float one_minus_b1, b2, one_minus_b2;
  float step_size;      // lr / (1 - beta1^t)
  float inv_bc2_sqrt;   // 1 / sqrt(1 - beta2^t)
  float eps;
};

// One element of torch.optim.Adam/AdamW's single-tensor update in fp32, in
// PyTorch's operation order: decay, m.lerp_(g, 1-b1), v.mul_(b2).addcmul_(g, g,
// 1-b2), denom = sqrt(v)/sqrt(bc2) + eps, p.addcdiv_(m, denom, -step_size).
// Written with explicit fused multiply-adds so that the AVX-512 path below
// gives the same bits.
inline void adam_element(float& p, float g_in, float& m, float& v, const AdamScalars& s) {
  const float w = p * s.decay_factor;
  const float g = std::fma(s.l2, w, g_in);
  const float mi = std::fma(s.one_minus_b1, g - m, m);
  const float vi = std::fma(v, s.b2, (s.one_minus_b2 * g) * g);
  m = mi;
  v = vi;
  const float denom = std::fma(std::sqrt(vi), s.inv_bc2_sqrt, s.eps);
  p = std::fma(-s.step_size, mi / denom, w);
}

void adam_chunk_scalar(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s) {
  for (int64_t i = 0; i < n; ++i) adam_element(p[i], g[i], m[i], v[i], s);
}

// Explicit intrinsics: GCC does not vectorise std::sqrt while errno
// semantics are on (the project does not build with -fno-math-errno).
__attribute__((target("avx512f"))) void adam_chunk_avx512(float* p, const float* g, float* m, float* v, int64_t n,
                                                           const AdamScalars& s) {
  const __m512 decay = _mm512_set1_ps(s.decay_factor), l2 = _mm512_set1_ps(s.l2);
  const __m512 omb1 = _mm512_set1_ps(s.one_minus_b1), b2 = _mm512_set1_ps(s.b2), omb2 = _mm512_set1_ps(s.one_minus_b2);
  const __m512 inv = _mm512_set1_ps(s.inv_bc2_sqrt), eps = _mm512_set1_ps(s.eps);
  const __m512 neg_step = _mm512_set1_ps(-s.step_size);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 w = _mm512_mul_ps(_mm512_loadu_ps(p + i), decay);
    const __m512 gi = _mm512_fmadd_ps(l2, w, _mm512_loadu_ps(g + i));
    const __m512 m0 = _mm512_loadu_ps(m + i);
    const __m512 mi = _mm512_fmadd_ps(omb1, _mm512_sub_ps(gi, m0), m0);
    const __m512 vi = _mm512_fmadd_ps(_mm512_loadu_ps(v + i), b2, _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    const __m512 denom = _mm512_fmadd_ps(_mm512_mask_sqrt_ps(vi, 0xFFFF, vi) /* unmasked form trips a GCC 12 -Wmaybe-uninitialized */, inv, eps);
    _mm512_storeu_ps(p + i, _mm512_fmadd_ps(neg_step, _mm512_div_ps(mi, denom), w));
  }
  adam_chunk_scalar(p + i, g + i, m + i, v + i, n - i, s);
}

void adam_chunk(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) adam_chunk_avx512(p, g, m, v, n, s);
  else adam_chunk_scalar(p, g, m, v, n, s);
}

}  // namespace

Adam::Adam(std::vector<nn::Parameter*> params, const OptimizerConfig& config, bool decoupled)
    : Optimizer(std::move(params)), cfg_(config), decoupled_(decoupled) {
  for (const nn::Parameter* p : params_) {
    exp_avg_.push_back(Tensor::zeros(p->value.shape(), DType::f32, MemoryKind::optimizer_state));
    exp_avg_sq_.push_back(Tensor::zeros(p->value.shape(), DType::f32, MemoryKind::optimizer_state));
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
  const auto spans = detail::make_spans(params_);
  const auto n_spans = static_cast<int64_t>(spans.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n_spans; ++k) {
    const detail::Span& sp = spans[static_cast<size_t>(k)];
    nn::Parameter& prm = *params_[sp.param];
    adam_chunk(prm.value.f32() + sp.begin, prm.grad.f32() + sp.begin, exp_avg_[sp.param].f32() + sp.begin,
               exp_avg_sq_[sp.param].f32() + sp.begin, sp.end - sp.begin, scalars[sp.param]);
  }
  for (nn::Parameter* p : params_) ++p->version;
  steps_ = t;
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
                        {"weight_decay", cfg_.weight_decay}}
      .dump();
}

void Adam::load_state(const std::map<std::string, Tensor>& tensors, const std::string& json) {
  // Restore into copies first so a refused state leaves the optimizer as it was.
  std::vector<Tensor> m = exp_avg_, v = exp_avg_sq_;
  for (size_t i = 0; i < params_.size(); ++i) {
    restore_tensor(tensors, params_[i]->name + ".exp_avg", m[i]);
    restore_tensor(tensors, params_[i]->name + ".exp_avg_sq", v[i]);
  }
  restore_common(json);
  exp_avg_ = std::move(m);
  exp_avg_sq_ = std::move(v);
}

}  // namespace mantissa::optim
