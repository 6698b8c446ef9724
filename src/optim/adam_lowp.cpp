// Adam / AdamW with moments stored in bf16, fp16 or FP8 with per-tensor
// power-of-two scales: decode, update in fp32, re-encode, fused per chunk
// (see the comment on Adam in optimizer.hpp for the two passes).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "mantissa/formats/convert.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/tensor/memory.hpp"
#include "optim/adam_kernel.hpp"
#include "optim/fused_loop.hpp"
#include "optim/state_chunk.hpp"

namespace mantissa::optim {

namespace {

using detail::load_chunk;

// t's elements [begin, begin + n) = round(buf / scale); buf is clobbered.
void store_chunk(Tensor& t, int64_t begin, int64_t n, float* buf, float scale) {
  if (t.dtype() == DType::f32) {
    std::memcpy(t.f32() + begin, buf, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (scale != 1.0f) {
    const float inv = 1.0f / scale;  // exact: scale is a power of two
    for (int64_t i = 0; i < n; ++i) buf[i] *= inv;
  }
  const auto& fmt = formats::preset(dtype_format_name(t.dtype()));
  auto* codes = static_cast<char*>(t.raw()) + static_cast<size_t>(begin) * dtype_size(t.dtype());
  formats::quantize(fmt, buf, codes, static_cast<size_t>(n));
}

// max(a, x) that lets a NaN through, so a non-finite moment keeps the old scale.
inline float max_abs_nan(float a, float x) {
  const float ax = std::fabs(x);
  return (ax > a || ax != ax) ? ax : a;
}

}  // namespace

void Adam::update_low_precision(const std::vector<detail::AdamScalars>& scalars) {
  const auto spans = detail::make_spans(params_);
  const auto n_spans = static_cast<int64_t>(spans.size());
  std::vector<float> amax_m(spans.size(), 0.0f), amax_v(spans.size(), 0.0f);

  // Pass 1: maxima of the updated moments.
#pragma omp parallel
  {
    std::vector<float> mb(static_cast<size_t>(detail::kChunkElems)), vb(mb.size());
#pragma omp for schedule(static)
    for (int64_t k = 0; k < n_spans; ++k) {
      const detail::Span& sp = spans[static_cast<size_t>(k)];
      const autograd::Parameter& prm = *params_[sp.param];
      const int64_t n = sp.end - sp.begin;
      load_chunk(exp_avg_[sp.param], sp.begin, n, mb.data());
      load_chunk(exp_avg_sq_[sp.param], sp.begin, n, vb.data());
      const float* p = prm.value.f32() + sp.begin;
      const float* g = prm.grad.f32() + sp.begin;
      const detail::AdamScalars& s = scalars[sp.param];
      float am = 0.0f, av = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        float mi = 0.0f, vi = 0.0f;
        detail::adam_moments(p[i], g[i], mb[static_cast<size_t>(i)], vb[static_cast<size_t>(i)], s, mi, vi);
        am = max_abs_nan(am, mi);
        av = max_abs_nan(av, vi);
      }
      amax_m[static_cast<size_t>(k)] = am;
      amax_v[static_cast<size_t>(k)] = av;
    }
  }

  std::vector<float> pm(params_.size(), 0.0f), pv(params_.size(), 0.0f);
  for (size_t k = 0; k < spans.size(); ++k) {
    pm[spans[k].param] = max_abs_nan(pm[spans[k].param], amax_m[k]);
    pv[spans[k].param] = max_abs_nan(pv[spans[k].param], amax_v[k]);
  }
  std::vector<float> scale_m(params_.size()), scale_v(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    scale_m[i] = state_scale_for(format_.m, pm[i], exp_avg_[i].scale());
    scale_v[i] = state_scale_for(format_.v, pv[i], exp_avg_sq_[i].scale());
  }

  // The observer's references: the unrounded moments at elements 0, stride,
  // ... (disjoint spans, so no race).
  std::vector<std::vector<float>> ref_m(params_.size()), ref_v(params_.size());
  std::vector<int64_t> stride(params_.size(), 1);
  if (observer_)
    for (size_t i = 0; i < params_.size(); ++i) {
      const int64_t n = params_[i]->value.numel();
      if (observer_values_ > 0 && n > observer_values_) stride[i] = (n + observer_values_ - 1) / observer_values_;
      const auto seen = static_cast<size_t>((n + stride[i] - 1) / stride[i]);
      if (exp_avg_[i].dtype() != DType::f32) ref_m[i].resize(seen);
      if (exp_avg_sq_[i].dtype() != DType::f32) ref_v[i].resize(seen);
    }
  // Elements of [begin, begin + n) at the parameter's stride, from buf into its reference.
  const auto keep = [&](std::vector<float>& ref, size_t param, int64_t begin, int64_t n, const float* buf) {
    if (ref.empty()) return;
    const int64_t s = stride[param];
    for (int64_t j = (begin + s - 1) / s * s; j < begin + n; j += s) ref[static_cast<size_t>(j / s)] = buf[j - begin];
  };

  // Pass 2: the same moments again, the parameter update, re-encoding.
#pragma omp parallel
  {
    std::vector<float> mb(static_cast<size_t>(detail::kChunkElems)), vb(mb.size());
#pragma omp for schedule(static)
    for (int64_t k = 0; k < n_spans; ++k) {
      const detail::Span& sp = spans[static_cast<size_t>(k)];
      autograd::Parameter& prm = *params_[sp.param];
      const int64_t n = sp.end - sp.begin;
      load_chunk(exp_avg_[sp.param], sp.begin, n, mb.data());
      load_chunk(exp_avg_sq_[sp.param], sp.begin, n, vb.data());
      detail::adam_chunk(prm.value.f32() + sp.begin, prm.grad.f32() + sp.begin, mb.data(), vb.data(), n,
                         scalars[sp.param]);
      keep(ref_m[sp.param], sp.param, sp.begin, n, mb.data());
      keep(ref_v[sp.param], sp.param, sp.begin, n, vb.data());
      store_chunk(exp_avg_[sp.param], sp.begin, n, mb.data(), scale_m[sp.param]);
      store_chunk(exp_avg_sq_[sp.param], sp.begin, n, vb.data(), scale_v[sp.param]);
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    exp_avg_[i].set_scale(scale_m[i]);
    exp_avg_sq_[i].set_scale(scale_v[i]);
  }
  if (observer_)
    for (size_t i = 0; i < params_.size(); ++i)
      for (int k = 0; k < 2; ++k) {
        const std::vector<float>& ref = k == 0 ? ref_m[i] : ref_v[i];
        if (ref.empty()) continue;
        const Tensor& t = k == 0 ? exp_avg_[i] : exp_avg_sq_[i];
        std::vector<float> q(ref.size());
        if (stride[i] == 1) load_chunk(t, 0, static_cast<int64_t>(q.size()), q.data());
        else
          for (size_t j = 0; j < q.size(); ++j) load_chunk(t, static_cast<int64_t>(j) * stride[i], 1, &q[j]);
        observer_({params_[i], k == 0 ? "exp_avg" : "exp_avg_sq", t.dtype(), ref.data(), q.data(),
                   static_cast<int64_t>(q.size()), t.scale(), stride[i]});
      }
}

TrainingStateBytes training_state_bytes() {
  const MemoryStats s = memory_stats();
  return {s.of(MemoryKind::parameter), s.of(MemoryKind::gradient), s.of(MemoryKind::optimizer_state)};
}

}  // namespace mantissa::optim
