// Scale-propagation rules for the Llama's and BERT's ops: RMS norm, SiLU,
// SwiGLU, rotary position embedding, causal or key-padded attention over
// separate q, k, v, and the sum of embedding tables (docs/scale-propagation.md).
// Each takes its output scale from scale_rule (propagate.hpp), the functions
// the `propagate` quantiser follows. Reductions run in fp64.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/scalify/propagate.hpp"
#include "scalify/propagate_detail.hpp"

namespace mantissa::scalify {

using namespace detail;  // data_of, make, need_shape, need_tensor_scale

namespace {

// A product or quotient of power-of-two scales as a float scale, refusing results outside fp32.
float scale_in_range(double s, std::string_view op) {
  need_shape(s >= 0x1p-126 && s <= 0x1p127, op, "gives a scale outside the fp32 range");
  return static_cast<float>(s);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu_value(double x) { return x * sigmoid(x); }
double silu_grad(double x) {
  const double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
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

double scale_rule::embedding_sum(std::span<const double> tables, Pow2Rounder& r) {
  double ss = 0, only = 0;
  int nonzero = 0;
  for (const double s : tables)
    if (s != 0) ss += s * s, only = s, ++nonzero;
  if (nonzero <= 1) return only;  // one table, or none: its scale, unrounded
  return r(std::sqrt(ss));
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

ScaledTensor silu(const ScaledTensor& x) {
  need_tensor_scale(x, "silu");
  const double s = x.scale();
  auto d = data_of(x);
  for (float& v : d) v = static_cast<float>(silu_value(v * s) / s);
  return make(std::move(d), x.shape(), static_cast<float>(scale_rule::silu(s)));
}

ScaledTensor silu_backward(const ScaledTensor& x, const ScaledTensor& dy) {
  need_tensor_scale(x, "silu_backward");
  need_tensor_scale(dy, "silu_backward");
  need_shape(x.shape() == dy.shape(), "silu_backward", "needs x and dy of one shape");
  const auto vx = x.values_f64();
  auto d = data_of(dy);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<float>(d[i] * silu_grad(vx[i]));
  return make(std::move(d), dy.shape(), static_cast<float>(scale_rule::silu_backward(dy.scale())));
}

ScaledTensor swiglu(const ScaledTensor& gate, const ScaledTensor& up) {
  need_tensor_scale(gate, "swiglu");
  need_tensor_scale(up, "swiglu");
  need_shape(gate.shape() == up.shape(), "swiglu", "needs gate and up of one shape");
  const double sg = gate.scale();
  const auto dg = data_of(gate), du = data_of(up);
  std::vector<float> out(dg.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(silu_value(dg[i] * sg) / sg * du[i]);
  return make(std::move(out), gate.shape(), scale_in_range(scale_rule::swiglu(sg, up.scale()), "swiglu"));
}

std::pair<ScaledTensor, ScaledTensor> swiglu_backward(const ScaledTensor& gate, const ScaledTensor& up,
                                                      const ScaledTensor& dy) {
  for (const auto* t : {&gate, &up, &dy}) need_tensor_scale(*t, "swiglu_backward");
  need_shape(gate.shape() == up.shape() && dy.shape() == up.shape(), "swiglu_backward", "needs gate, up and dy of one shape");
  const double sg = gate.scale();
  const auto dg = data_of(gate), du = data_of(up), dd = data_of(dy);
  std::vector<float> d_gate(dg.size()), d_up(dg.size());
  for (size_t i = 0; i < dg.size(); ++i) {
    const double g = dg[i] * sg;
    d_gate[i] = static_cast<float>(static_cast<double>(dd[i]) * du[i] * silu_grad(g));  // x dy.s up.s
    d_up[i] = static_cast<float>(static_cast<double>(dd[i]) * silu_value(g) / sg);      // x dy.s gate.s
  }
  const double sd = dy.scale();
  return {make(std::move(d_gate), gate.shape(), scale_in_range(scale_rule::swiglu_backward_gate(sd, up.scale()), "swiglu_backward")),
          make(std::move(d_up), up.shape(), scale_in_range(scale_rule::swiglu_backward_up(sd, sg), "swiglu_backward"))};
}

ScaledTensor rotary(const ScaledTensor& x, int64_t heads, double theta, bool inverse) {
  need_tensor_scale(x, "rotary");
  need_shape(x.data.ndim() == 3 && heads > 0 && x.data.dim(2) % heads == 0 && (x.data.dim(2) / heads) % 2 == 0, "rotary",
       "needs x [B, T, heads*D] with D even");
  const int64_t B = x.data.dim(0), T = x.data.dim(1), W = x.data.dim(2), D = W / heads, half = D / 2;
  auto d = data_of(x);
  const double sign = inverse ? -1.0 : 1.0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      const double c = std::cos(a), s = sign * std::sin(a);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < heads; ++h) {
          float* p = d.data() + (b * T + t) * W + h * D;
          const double x1 = p[i], x2 = p[i + half];
          p[i] = static_cast<float>(x1 * c - x2 * s);
          p[i + half] = static_cast<float>(x2 * c + x1 * s);
        }
    }
  return make(std::move(d), x.shape(), static_cast<float>(scale_rule::rotary(x.scale())));
}

ScaledTensor attention(const ScaledTensor& q, const ScaledTensor& k, const ScaledTensor& v, int64_t heads,
                       const Tensor* key_len) {
  for (const auto* t : {&q, &k, &v}) need_tensor_scale(*t, "attention");
  need_shape(q.data.ndim() == 3 && k.shape() == v.shape() && k.data.ndim() == 3 && heads > 0 &&
           q.data.dim(2) % heads == 0 && k.data.dim(0) == q.data.dim(0) && k.data.dim(1) == q.data.dim(1),
       "attention", "needs q [B, T, H*D] and k, v [B, T, KV*D]");
  const int64_t B = q.data.dim(0), T = q.data.dim(1), C = q.data.dim(2), D = C / heads, KC = k.data.dim(2);
  need_shape(KC % D == 0 && heads % (KC / D) == 0, "attention", "needs kv heads dividing the query heads");
  const int64_t group = heads / (KC / D);
  if (key_len)
    need_shape(key_len->dtype() == DType::i32 && key_len->numel() == B, "attention", "needs key_len i32 [B]");
  const auto dq = data_of(q), dk = data_of(k), dv = data_of(v);
  // The scores leave the scaled world (softmax rule); P v is computed on v's data.
  const double mult = static_cast<double>(q.scale()) * k.scale() / std::sqrt(static_cast<double>(D));
  std::vector<float> out(static_cast<size_t>(B * T * C));
  std::vector<double> p(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = key_len ? key_len->data<int32_t>()[b] : T;
    need_shape(len >= 1 && len <= T, "attention", "needs key_len in [1, T]");
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t keys = key_len ? len : t + 1;
        const float* qr = dq.data() + (b * T + t) * C + h * D;
        const int64_t kh = (h / group) * D;
        double mx = -INFINITY, sum = 0;
        for (int64_t u = 0; u < keys; ++u) {
          const float* kr = dk.data() + (b * T + u) * KC + kh;
          double dot = 0;
          for (int64_t e = 0; e < D; ++e) dot += static_cast<double>(qr[e]) * kr[e];
          mx = std::max(mx, p[static_cast<size_t>(u)] = dot * mult);
        }
        for (int64_t u = 0; u < keys; ++u) sum += (p[static_cast<size_t>(u)] = std::exp(p[static_cast<size_t>(u)] - mx));
        float* o = out.data() + (b * T + t) * C + h * D;
        for (int64_t e = 0; e < D; ++e) {
          double acc = 0;
          for (int64_t u = 0; u < keys; ++u) acc += p[static_cast<size_t>(u)] * dv[static_cast<size_t>((b * T + u) * KC + kh + e)];
          o[e] = static_cast<float>(acc / sum);
        }
      }
  }
  return make(std::move(out), q.shape(), static_cast<float>(scale_rule::attention(v.scale())));
}

ScaledTensor embedding_sum(std::span<const Tensor> ids, std::span<const ScaledTensor> tables, Pow2Rounder& r) {
  need_shape(!tables.empty() && ids.size() == tables.size(), "embedding_sum", "needs one id tensor per table");
  const int64_t N = ids[0].numel(), C = tables[0].cols();
  std::vector<double> scales;
  std::vector<std::vector<float>> data;
  for (size_t i = 0; i < tables.size(); ++i) {
    need_tensor_scale(tables[i], "embedding_sum");
    need_shape(ids[i].dtype() == DType::i32 && ids[i].numel() == N && tables[i].data.ndim() == 2 && tables[i].cols() == C,
         "embedding_sum", "needs i32 ids [N] and tables [V, C] of one width");
    const std::vector<float>& d = data.emplace_back(data_of(tables[i]));
    const bool zero = std::all_of(d.begin(), d.end(), [](float v) { return v == 0.0f; });
    scales.push_back(zero ? 0.0 : static_cast<double>(tables[i].scale()));
  }
  double zs = scale_rule::embedding_sum(scales, r);
  if (zs == 0) zs = 1;  // every table zero: any scale
  std::vector<double> acc(static_cast<size_t>(N * C), 0.0);
  for (size_t i = 0; i < tables.size(); ++i) {
    const std::vector<float>& d = data[i];
    const int64_t V = tables[i].data.dim(0);
    const double f = tables[i].scale() / zs;  // a power of two: exact
    for (int64_t n = 0; n < N; ++n) {
      const int32_t id = ids[i].data<int32_t>()[n];
      need_shape(id >= 0 && id < V, "embedding_sum", "got id " + std::to_string(id) + " outside [0, " + std::to_string(V) + ")");
      for (int64_t c = 0; c < C; ++c) acc[static_cast<size_t>(n * C + c)] += d[static_cast<size_t>(id * C + c)] * f;
    }
  }
  std::vector<float> out(acc.begin(), acc.end());
  return make(std::move(out), {N, C}, static_cast<float>(zs));
}

}  // namespace mantissa::scalify
