// Derived scale-propagation rules for the norms: layer norm (GPT, BERT) and
// RMS norm (Llama), forward and backward (docs/scale-propagation.md). The
// statistics run in fp64 on the data, with eps divided by the input's scale
// squared, so the normalisation is that of the values.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/scalify/propagate.hpp"
#include "scalify/propagate_detail.hpp"

namespace mantissa::scalify {

using namespace detail;  // propagate_detail.hpp

namespace {

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

// 1 / rms of each row of d [R, C] with eps on the data (eps_values / s^2).
std::vector<double> inv_rms(const std::vector<float>& d, int64_t R, int64_t C, double eps_data) {
  std::vector<double> out(static_cast<size_t>(R));
  for (int64_t i = 0; i < R; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < C; ++j) ss += static_cast<double>(d[static_cast<size_t>(i * C + j)]) * d[static_cast<size_t>(i * C + j)];
    out[static_cast<size_t>(i)] = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps_data);
  }
  return out;
}

}  // namespace

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

ScaledTensor rms_norm(const ScaledTensor& x, const ScaledTensor& w, double eps) {
  need_tensor_scale(x, "rms_norm");
  need_tensor_scale(w, "rms_norm");
  const int64_t R = x.rows(), C = x.cols();
  need_shape(w.numel() == C, "rms_norm", "needs a gain of " + std::to_string(C));
  const double sx = x.scale();
  const auto d = data_of(x), dw = data_of(w);
  const auto inv = inv_rms(d, R, C, eps / (sx * sx));  // rms(d s) with eps == s rms(d) with eps / s^2
  std::vector<float> out(d.size());
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      const auto k = static_cast<size_t>(i * C + j);
      out[k] = static_cast<float>(d[k] * inv[static_cast<size_t>(i)] * dw[static_cast<size_t>(j)]);
    }
  return make(std::move(out), x.shape(), static_cast<float>(scale_rule::rms_norm(w.scale())));
}

ScaledTensor rms_norm_backward(const ScaledTensor& x, const ScaledTensor& w, const ScaledTensor& dy, double eps) {
  for (const auto* t : {&x, &w, &dy}) need_tensor_scale(*t, "rms_norm_backward");
  const int64_t R = x.rows(), C = x.cols();
  need_shape(w.numel() == C && dy.shape() == x.shape(), "rms_norm_backward", "needs gain [C] and dy shaped as x");
  const double sx = x.scale();
  const auto d = data_of(x), dw = data_of(w), dd = data_of(dy);
  const auto inv = inv_rms(d, R, C, eps / (sx * sx));
  std::vector<float> out(d.size());
  for (int64_t i = 0; i < R; ++i) {
    const double ir = inv[static_cast<size_t>(i)];
    double mgn = 0;  // mean of g n, g = w dy, n = x / rms
    for (int64_t j = 0; j < C; ++j) {
      const auto k = static_cast<size_t>(i * C + j);
      mgn += static_cast<double>(dd[k]) * dw[static_cast<size_t>(j)] * d[k] * ir;
    }
    mgn /= static_cast<double>(C);
    for (int64_t j = 0; j < C; ++j) {
      const auto k = static_cast<size_t>(i * C + j);
      out[k] = static_cast<float>((static_cast<double>(dd[k]) * dw[static_cast<size_t>(j)] - d[k] * ir * mgn) * ir);
    }
  }
  return make(std::move(out), x.shape(), scale_in_range(static_cast<double>(dy.scale()) * w.scale() / sx, "rms_norm_backward"));
}

}  // namespace mantissa::scalify
