#include "mantissa/optim/clip.hpp"

#include <cmath>

#include "optim/fused_loop.hpp"

namespace mantissa::optim {

std::vector<double> scale_grads_chunk_sumsq(const std::vector<autograd::Parameter*>& params, float factor,
                                            const OwnedRanges* owned) {
  const auto spans = detail::make_spans(params, true, owned);
  const auto n_spans = static_cast<int64_t>(spans.size());
  // One partial sum per chunk, added in chunk order afterwards: the result
  // does not depend on the thread count or scheduling.
  std::vector<double> partial(spans.size(), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n_spans; ++k) {
    const detail::Span& sp = spans[static_cast<size_t>(k)];
    float* g = params[sp.param]->grad.f32();
    double s = 0.0;
    if (factor == 1.0f) {
#pragma omp simd reduction(+ : s)
      for (int64_t i = sp.begin; i < sp.end; ++i) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    } else {
#pragma omp simd reduction(+ : s)
      for (int64_t i = sp.begin; i < sp.end; ++i) {
        s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
        g[i] *= factor;
      }
    }
    partial[static_cast<size_t>(k)] = s;
  }
  return partial;
}

double scale_grads_sumsq(const std::vector<autograd::Parameter*>& params, float factor) {
  double total = 0.0;
  for (double s : scale_grads_chunk_sumsq(params, factor)) total += s;
  return total;
}

double grad_norm(const std::vector<autograd::Parameter*>& params) { return std::sqrt(scale_grads_sumsq(params, 1.0f)); }

void scale_grads(const std::vector<autograd::Parameter*>& params, float factor, const OwnedRanges* owned) {
  const auto spans = detail::make_spans(params, true, owned);
  const auto n_spans = static_cast<int64_t>(spans.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n_spans; ++k) {
    const detail::Span& sp = spans[static_cast<size_t>(k)];
    float* g = params[sp.param]->grad.f32();
#pragma omp simd
    for (int64_t i = sp.begin; i < sp.end; ++i) g[i] *= factor;
  }
}

void clip_to_norm(const std::vector<autograd::Parameter*>& params, double norm, double max_norm, const OwnedRanges* owned) {
  if (!std::isfinite(norm) || !(max_norm > 0)) return;
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) scale_grads(params, static_cast<float>(coef), owned);
}

double clip_grad_norm(const std::vector<autograd::Parameter*>& params, double max_norm) {
  const double norm = grad_norm(params);
  clip_to_norm(params, norm, max_norm);
  return norm;
}

}  // namespace mantissa::optim
