// Derived scale-propagation rules for the GPT's non-linear ops: GELU, layer
// norm, softmax, causal attention, cross-entropy (docs/scale-propagation.md).
// Reductions run in fp64 on the values, as the engine's fp32-class ops do in fp32.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "mantissa/scalify/propagate.hpp"
#include "scalify/propagate_detail.hpp"

namespace mantissa::scalify {

using detail::data_of;
using detail::make;
using detail::need_shape;
using detail::need_tensor_scale;

namespace {

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2/pi)

double gelu_value(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + 0.044715 * x * x * x))); }
double gelu_grad(double x) {
  const double u = kGeluC * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * 0.044715 * x * x);
}

// Mean and 1 / sigma of one row of C values (the layer norm's statistics, in
// the data's units: eps_data is eps over the tensor's scale squared).
struct RowStats {
  double mean, rstd;
};
RowStats row_stats(const float* row, int64_t C, double eps_data) {
  double mean = 0, var = 0;
  for (int64_t j = 0; j < C; ++j) mean += row[j];
  mean /= static_cast<double>(C);
  for (int64_t j = 0; j < C; ++j) var += (row[j] - mean) * (row[j] - mean);
  var /= static_cast<double>(C);
  return {mean, 1.0 / std::sqrt(var + eps_data)};
}

}  // namespace

ScaledTensor gelu(const ScaledTensor& x) {
  need_tensor_scale(x, "gelu");
  const double s = x.scale();
  auto d = data_of(x);
  for (float& v : d) v = static_cast<float>(gelu_value(v * s) / s);
  return make(std::move(d), x.shape(), static_cast<float>(scale_rule::gelu(x.scale())));
}

ScaledTensor gelu_backward(const ScaledTensor& x, const ScaledTensor& dy) {
  need_tensor_scale(x, "gelu_backward");
  need_tensor_scale(dy, "gelu_backward");
  need_shape(x.shape() == dy.shape(), "gelu_backward", "needs x and dy of one shape");
  const auto vx = x.values();
  auto d = data_of(dy);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<float>(d[i] * gelu_grad(vx[i]));
  return make(std::move(d), dy.shape(), static_cast<float>(scale_rule::gelu_backward(dy.scale())));
}

ScaledTensor layer_norm(const ScaledTensor& x, const ScaledTensor& w, const ScaledTensor& b, Pow2Rounder& r) {
  for (const auto* t : {&x, &w, &b}) need_tensor_scale(*t, "layer_norm");
  const int64_t R = x.rows(), C = x.cols();
  need_shape(w.numel() == C && b.numel() == C, "layer_norm", "needs gain and bias of " + std::to_string(C));
  const double sx = x.scale();
  const double eps_data = 1e-5 / (sx * sx);  // LN(d s) with eps == LN(d) with eps / s^2
  const auto d = data_of(x), dw = data_of(w), db = data_of(b);
  // n * w has scale w.s; the bias joins by the add rule.
  const double sw = w.scale(), sb = b.scale();
  const bool b_zero = std::all_of(db.begin(), db.end(), [](float v) { return v == 0.0f; });
  const auto zs = static_cast<float>(scale_rule::layer_norm(sw, b_zero ? 0.0 : sb, r));
  std::vector<float> out(d.size());
  for (int64_t i = 0; i < R; ++i) {
    const float* row = d.data() + i * C;
    const auto [mean, rstd] = row_stats(row, C, eps_data);
    for (int64_t j = 0; j < C; ++j) {
      const double n = (row[j] - mean) * rstd;
      out[static_cast<size_t>(i * C + j)] = static_cast<float>((n * dw[static_cast<size_t>(j)] * sw + db[static_cast<size_t>(j)] * sb) / zs);
    }
  }
  return make(std::move(out), x.shape(), zs);
}

ScaledTensor layer_norm_backward(const ScaledTensor& x, const ScaledTensor& w, const ScaledTensor& dy) {
  for (const auto* t : {&x, &w, &dy}) need_tensor_scale(*t, "layer_norm_backward");
  const int64_t R = x.rows(), C = x.cols();
  need_shape(w.numel() == C && dy.shape() == x.shape(), "layer_norm_backward", "needs gain [C] and dy shaped as x");
  const double sx = x.scale();
  const double eps_data = 1e-5 / (sx * sx);
  const auto d = data_of(x), dw = data_of(w), dd = data_of(dy);
  std::vector<float> out(d.size());
  std::vector<double> n(static_cast<size_t>(C)), g(static_cast<size_t>(C));
  for (int64_t i = 0; i < R; ++i) {
    const float* row = d.data() + i * C;
    const auto [mean, rstd] = row_stats(row, C, eps_data);
    double mg = 0, mgn = 0;
    for (int64_t j = 0; j < C; ++j) {
      const auto k = static_cast<size_t>(j);
      n[k] = (row[j] - mean) * rstd;
      g[k] = dd[static_cast<size_t>(i * C + j)] * static_cast<double>(dw[k]);
      mg += g[k];
      mgn += g[k] * n[k];
    }
    mg /= static_cast<double>(C);
    mgn /= static_cast<double>(C);
    for (int64_t j = 0; j < C; ++j) {
      const auto k = static_cast<size_t>(j);
      out[static_cast<size_t>(i * C + j)] = static_cast<float>((g[k] - mg - n[k] * mgn) * rstd);
    }
  }
  const double s = static_cast<double>(dy.scale()) * w.scale() / sx;
  if (s < 0x1p-126 || s > 0x1p127) throw std::invalid_argument("scale propagation: layer_norm_backward's scale leaves the fp32 range");
  return make(std::move(out), x.shape(), static_cast<float>(s));
}

ScaledTensor softmax(const ScaledTensor& x) {
  need_tensor_scale(x, "softmax");
  const int64_t R = x.rows(), C = x.cols();
  auto v = x.values();
  for (int64_t i = 0; i < R; ++i) {
    float* row = v.data() + i * C;
    const float mx = *std::max_element(row, row + C);
    double sum = 0;
    for (int64_t j = 0; j < C; ++j) sum += std::exp(static_cast<double>(row[j]) - mx);
    for (int64_t j = 0; j < C; ++j) row[j] = static_cast<float>(std::exp(static_cast<double>(row[j]) - mx) / sum);
  }
  return make(std::move(v), x.shape(), 1.0f);
}

ScaledTensor softmax_backward(const ScaledTensor& y, const ScaledTensor& dy) {
  need_tensor_scale(y, "softmax_backward");
  need_tensor_scale(dy, "softmax_backward");
  need_shape(y.shape() == dy.shape(), "softmax_backward", "needs y and dy of one shape");
  const int64_t R = y.rows(), C = y.cols();
  const auto vy = y.values();
  auto d = data_of(dy);
  for (int64_t i = 0; i < R; ++i) {
    double dot = 0;
    for (int64_t j = 0; j < C; ++j) dot += static_cast<double>(vy[static_cast<size_t>(i * C + j)]) * d[static_cast<size_t>(i * C + j)];
    for (int64_t j = 0; j < C; ++j) {
      const auto k = static_cast<size_t>(i * C + j);
      d[k] = static_cast<float>(vy[k] * (d[k] - dot));
    }
  }
  return make(std::move(d), dy.shape(), dy.scale());
}

ScaledTensor causal_attention(const ScaledTensor& qkv, int64_t heads) {
  need_tensor_scale(qkv, "causal_attention");
  need_shape(qkv.data.ndim() == 3 && qkv.data.dim(2) % (3 * heads) == 0, "causal_attention",
             "needs qkv [B, T, 3C] with C divisible by heads");
  const int64_t B = qkv.data.dim(0), T = qkv.data.dim(1), C = qkv.data.dim(2) / 3, hd = C / heads;
  const auto d = data_of(qkv);
  const double s = qkv.scale();
  // scores = q.k s^2 / sqrt(hd) leave the scaled world (softmax rule); P v is
  // computed on v's data and keeps qkv's scale.
  const double score_mult = s * s / std::sqrt(static_cast<double>(hd));
  std::vector<float> out(static_cast<size_t>(B * T * C));
  std::vector<double> p(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const float* q = d.data() + (b * T + t) * 3 * C + h * hd;
        double mx = -INFINITY, sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          const float* k = d.data() + (b * T + u) * 3 * C + C + h * hd;
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e) dot += static_cast<double>(q[e]) * k[e];
          p[static_cast<size_t>(u)] = dot * score_mult;
          mx = std::max(mx, p[static_cast<size_t>(u)]);
        }
        for (int64_t u = 0; u <= t; ++u) sum += (p[static_cast<size_t>(u)] = std::exp(p[static_cast<size_t>(u)] - mx));
        float* o = out.data() + (b * T + t) * C + h * hd;
        for (int64_t e = 0; e < hd; ++e) {
          double acc = 0;
          for (int64_t u = 0; u <= t; ++u) acc += p[static_cast<size_t>(u)] * d[static_cast<size_t>((b * T + u) * 3 * C + 2 * C + h * hd + e)];
          o[e] = static_cast<float>(acc / sum);
        }
      }
  return make(std::move(out), {B, T, C}, static_cast<float>(scale_rule::causal_attention(qkv.scale())));
}

ScaledTensor cross_entropy(const ScaledTensor& logits, const Tensor& targets) {
  need_tensor_scale(logits, "cross_entropy");
  const int64_t N = logits.rows(), V = logits.cols();
  need_shape(targets.numel() == N && targets.dtype() == DType::i32, "cross_entropy", "needs i32 targets [N]");
  const auto v = logits.values();
  double loss = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int32_t t = targets.data<int32_t>()[i];
    if (t < 0) continue;
    need_shape(t < V, "cross_entropy", "got target " + std::to_string(t) + " >= V");
    const float* row = v.data() + i * V;
    const double mx = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(row[j] - mx);
    loss += std::log(sum) + mx - row[t];
  }
  return make({static_cast<float>(loss)}, {1}, 1.0f);
}

ScaledTensor cross_entropy_backward(const ScaledTensor& logits, const Tensor& targets, const ScaledTensor& dloss) {
  need_tensor_scale(logits, "cross_entropy_backward");
  need_tensor_scale(dloss, "cross_entropy_backward");
  const int64_t N = logits.rows(), V = logits.cols();
  need_shape(targets.numel() == N && dloss.numel() == 1, "cross_entropy_backward", "needs targets [N] and dloss [1]");
  const auto v = logits.values();
  const float seed = data_of(dloss)[0];
  std::vector<float> out(v.size(), 0.0f);
  for (int64_t i = 0; i < N; ++i) {
    const int32_t t = targets.data<int32_t>()[i];
    if (t < 0) continue;
    const float* row = v.data() + i * V;
    const double mx = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(row[j] - mx);
    for (int64_t j = 0; j < V; ++j)
      out[static_cast<size_t>(i * V + j)] = static_cast<float>((std::exp(row[j] - mx) / sum - (j == t ? 1.0 : 0.0)) * seed);
  }
  return make(std::move(out), logits.shape(), dloss.scale());
}

}  // namespace mantissa::scalify
