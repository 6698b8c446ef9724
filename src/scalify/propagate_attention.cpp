// Derived scale-propagation rules for attention and its pieces: softmax,
// causal attention on one fused qkv (GPT), attention over separate q, k, v
// with grouped kv heads, causal or key-padded (Llama, BERT), and the rotary
// position embedding (docs/scale-propagation.md). Scores leave the scaled
// world in fp64 (the softmax rule); P v is computed on v's data.
#include <algorithm>
#include <cmath>
#include <vector>

#include "mantissa/scalify/propagate.hpp"
#include "scalify/propagate_detail.hpp"

namespace mantissa::scalify {

using namespace detail;  // propagate_detail.hpp

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

}  // namespace mantissa::scalify
