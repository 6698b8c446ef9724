// Plain float64 loops: forward and backward of every op unit scaling
// covers and of attention in every variant the models use (causal,
// key-padded, grouped kv heads), written independently of the engine so that
// kernels, autograd ops and the scale rules can be checked against them.
// Row-major; shapes named in each comment. Backward functions return the
// gradient of sum(g * f(x)) with respect to each input (no scaling).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

namespace mantissa::ref {

using Vec = std::vector<double>;

inline Vec randn(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> d(0.0, 1.0);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

inline double variance(const Vec& v) {
  double m = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size());
}
inline double stddev(const Vec& v) { return std::sqrt(variance(v)); }
inline Vec scaled(Vec v, double s) {
  for (double& x : v) x *= s;
  return v;
}

// matmul: X[b,m] @ W[m,n] -> Y[b,n]; dX = G W^T, dW = X^T G.
inline Vec matmul(const Vec& x, const Vec& w, int64_t b, int64_t m, int64_t n) {
  Vec y(static_cast<size_t>(b * n), 0.0);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t k = 0; k < m; ++k) {
      const double a = x[i * m + k];
      for (int64_t j = 0; j < n; ++j) y[i * n + j] += a * w[k * n + j];
    }
  return y;
}
inline Vec transpose(const Vec& a, int64_t rows, int64_t cols) {
  Vec t(a.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = a[i * cols + j];
  return t;
}
struct MatmulGrads { Vec dx, dw; };
inline MatmulGrads matmul_backward(const Vec& x, const Vec& w, const Vec& g, int64_t b, int64_t m, int64_t n) {
  return {matmul(g, transpose(w, m, n), b, n, m), matmul(transpose(x, b, m), g, m, b, n)};
}

// linear: X[B,fi], W[fo,fi], bias[fo] -> Y[B,fo] = X W^T + bias.
inline Vec linear(const Vec& x, const Vec& w, const Vec* bias, int64_t batch, int64_t fi, int64_t fo) {
  Vec y = matmul(x, transpose(w, fo, fi), batch, fi, fo);
  if (bias)
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t j = 0; j < fo; ++j) y[i * fo + j] += (*bias)[j];
  return y;
}
struct LinearGrads { Vec dx, dw, db; };
inline LinearGrads linear_backward(const Vec& x, const Vec& w, const Vec& g, int64_t batch, int64_t fi, int64_t fo) {
  LinearGrads r{matmul(g, w, batch, fo, fi), matmul(transpose(g, batch, fo), x, fo, batch, fi), Vec(static_cast<size_t>(fo), 0.0)};
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < fo; ++j) r.db[j] += g[i * fo + j];
  return r;
}

// embedding: ids[T] into W[V,d] -> Y[T,d]; dW[v] = sum of G rows with id v.
inline Vec embedding(const std::vector<int64_t>& ids, const Vec& w, int64_t d) {
  Vec y;
  for (int64_t id : ids) y.insert(y.end(), w.begin() + id * d, w.begin() + (id + 1) * d);
  return y;
}
inline Vec embedding_backward(const std::vector<int64_t>& ids, const Vec& g, int64_t vocab, int64_t d) {
  Vec dw(static_cast<size_t>(vocab * d), 0.0);
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t j = 0; j < d; ++j) dw[ids[t] * d + j] += g[t * d + j];
  return dw;
}

// Elementwise: value and derivative at x.
inline double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }
inline double normal_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi); }
// gelu(mult x) / mult (exact erf form).
inline double gelu(double x, double mult = 1) { return x * normal_cdf(mult * x); }
inline double gelu_grad(double x, double mult = 1) {
  const double u = mult * x;
  return normal_cdf(u) + u * normal_pdf(u);
}
inline double relu(double x) { return x > 0 ? x : 0; }
inline double relu_grad(double x) { return x > 0 ? 1 : 0; }
inline double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
// x * sigmoid(mult x).
inline double silu(double x, double mult = 1) { return x * sigmoid(mult * x); }
inline double silu_grad(double x, double mult = 1) {
  const double s = sigmoid(mult * x);
  return s + x * mult * s * (1 - s);
}

// softmax(mult * x) over rows of length s: P[rows,s]; dx = mult P (g - <P,g>).
inline Vec softmax(const Vec& x, int64_t rows, int64_t s, double mult = 1) {
  Vec p(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < s; ++j) mx = std::max(mx, mult * x[r * s + j]);
    for (int64_t j = 0; j < s; ++j) sum += p[r * s + j] = std::exp(mult * x[r * s + j] - mx);
    for (int64_t j = 0; j < s; ++j) p[r * s + j] /= sum;
  }
  return p;
}
inline Vec softmax_backward(const Vec& p, const Vec& g, int64_t rows, int64_t s, double mult = 1) {
  Vec dx(p.size());
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0;
    for (int64_t j = 0; j < s; ++j) dot += p[r * s + j] * g[r * s + j];
    for (int64_t j = 0; j < s; ++j) dx[r * s + j] = mult * p[r * s + j] * (g[r * s + j] - dot);
  }
  return dx;
}

// Multi-head attention: B sequences of T tokens, H query heads of size D over KV key/value
// heads (H a multiple of KV; query head h reads kv head h / (H / KV)). Row t of sequence b
// attends to keys 0..t (causal: key_len empty) or 0..key_len[b]-1 (right-padded keys).
struct AttentionShape {
  int64_t B, T, H, KV, D;
};
inline int64_t attended_keys(const std::vector<int32_t>& key_len, int64_t b, int64_t t) {
  return key_len.empty() ? t + 1 : key_len[b];
}

// q [B,T,H*D], k and v [B,T,KV*D] -> out [B,T,H*D] = softmax(c q k^T + mask) v per head;
// probs [B,H,T,T] (0 at masked keys), lse [B,H,T] the log-sum-exp of each row's scores.
struct Attention { Vec out, probs, lse; };
inline Attention attention(const Vec& q, const Vec& k, const Vec& v, const AttentionShape& s, double c,
                           const std::vector<int32_t>& key_len = {}) {
  const int64_t B = s.B, T = s.T, H = s.H, KV = s.KV, D = s.D, group = H / KV;
  Attention a{Vec(static_cast<size_t>(B * T * H * D), 0.0), Vec(static_cast<size_t>(B * H * T * T), 0.0),
              Vec(static_cast<size_t>(B * H * T), 0.0)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t n = attended_keys(key_len, b, t), qo = ((b * T + t) * H + h) * D;
        double* p = &a.probs[((b * H + h) * T + t) * T];
        double mx = -INFINITY, sum = 0;
        for (int64_t u = 0; u < n; ++u) {
          const int64_t ko = ((b * T + u) * KV + h / group) * D;
          double dot = 0;
          for (int64_t e = 0; e < D; ++e) dot += q[qo + e] * k[ko + e];
          mx = std::max(mx, p[u] = c * dot);
        }
        for (int64_t u = 0; u < n; ++u) sum += p[u] = std::exp(p[u] - mx);
        a.lse[(b * H + h) * T + t] = mx + std::log(sum);
        for (int64_t u = 0; u < n; ++u) {
          const int64_t vo = ((b * T + u) * KV + h / group) * D;
          p[u] /= sum;
          for (int64_t e = 0; e < D; ++e) a.out[qo + e] += p[u] * v[vo + e];
        }
      }
  return a;
}
// Gradient of sum(g * out) with respect to q, k and v from the forward's probabilities; a kv
// head's gradient sums those of the query heads reading it.
struct AttentionGrads { Vec dq, dk, dv; };
inline AttentionGrads attention_backward(const Vec& q, const Vec& k, const Vec& v, const Vec& probs, const Vec& g,
                                         const AttentionShape& s, double c, const std::vector<int32_t>& key_len = {}) {
  const int64_t B = s.B, T = s.T, H = s.H, KV = s.KV, D = s.D, group = H / KV;
  AttentionGrads r{Vec(q.size(), 0.0), Vec(k.size(), 0.0), Vec(v.size(), 0.0)};
  Vec dp(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t n = attended_keys(key_len, b, t), qo = ((b * T + t) * H + h) * D;
        const double* p = &probs[((b * H + h) * T + t) * T];
        double dot = 0;
        for (int64_t u = 0; u < n; ++u) {
          const int64_t ko = ((b * T + u) * KV + h / group) * D;
          dp[u] = 0;
          for (int64_t e = 0; e < D; ++e) {
            dp[u] += g[qo + e] * v[ko + e];
            r.dv[ko + e] += p[u] * g[qo + e];
          }
          dot += p[u] * dp[u];
        }
        for (int64_t u = 0; u < n; ++u) {
          const int64_t ko = ((b * T + u) * KV + h / group) * D;
          const double dl = c * p[u] * (dp[u] - dot);
          for (int64_t e = 0; e < D; ++e) {
            r.dq[qo + e] += dl * k[ko + e];
            r.dk[ko + e] += dl * q[qo + e];
          }
        }
      }
  return r;
}

// The attention of GPT and BERT: one fused qkv [B,T,3C] (rows [q | k | v], C = H*D, no kv
// grouping) -> out [B,T,C], scores scaled by 1/sqrt(D); causal, or over key_len[b] keys.
struct Qkv { Vec q, k, v; };
inline Qkv split_qkv(const Vec& qkv, int64_t rows, int64_t C) {
  Qkv x{Vec(static_cast<size_t>(rows * C)), Vec(static_cast<size_t>(rows * C)), Vec(static_cast<size_t>(rows * C))};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < C; ++j) {
      x.q[r * C + j] = qkv[r * 3 * C + j];
      x.k[r * C + j] = qkv[r * 3 * C + C + j];
      x.v[r * C + j] = qkv[r * 3 * C + 2 * C + j];
    }
  return x;
}
inline Attention fused_attention(const Vec& qkv, int64_t B, int64_t T, int64_t C, int64_t H,
                                 const std::vector<int32_t>& key_len = {}) {
  const Qkv x = split_qkv(qkv, B * T, C);
  return attention(x.q, x.k, x.v, {B, T, H, H, C / H}, 1 / std::sqrt(static_cast<double>(C / H)), key_len);
}
// Gradient of sum(g * out) with respect to qkv [B,T,3C].
inline Vec fused_attention_backward(const Vec& qkv, const Vec& probs, const Vec& g, int64_t B, int64_t T, int64_t C,
                                    int64_t H, const std::vector<int32_t>& key_len = {}) {
  const Qkv x = split_qkv(qkv, B * T, C);
  const AttentionGrads d =
      attention_backward(x.q, x.k, x.v, probs, g, {B, T, H, H, C / H}, 1 / std::sqrt(static_cast<double>(C / H)), key_len);
  Vec dqkv(qkv.size());
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t j = 0; j < C; ++j) {
      dqkv[r * 3 * C + j] = d.dq[r * C + j];
      dqkv[r * 3 * C + C + j] = d.dk[r * C + j];
      dqkv[r * 3 * C + 2 * C + j] = d.dv[r * C + j];
    }
  return dqkv;
}

// layer norm / rms norm over rows of length d: Y[rows,d].
struct NormGrads { Vec dx, dw, db; };
inline Vec layer_norm(const Vec& x, const Vec& w, const Vec& b, int64_t rows, int64_t d, double eps, Vec* xhat_out = nullptr) {
  Vec y(x.size()), xhat(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mu += x[r * d + j];
    mu /= static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j) var += (x[r * d + j] - mu) * (x[r * d + j] - mu);
    const double inv = 1 / std::sqrt(var / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j) {
      xhat[r * d + j] = (x[r * d + j] - mu) * inv;
      y[r * d + j] = xhat[r * d + j] * w[j] + b[j];
    }
  }
  if (xhat_out) *xhat_out = xhat;
  return y;
}
inline NormGrads layer_norm_backward(const Vec& x, const Vec& w, const Vec& g, int64_t rows, int64_t d, double eps) {
  Vec xhat;
  layer_norm(x, w, Vec(static_cast<size_t>(d), 0.0), rows, d, eps, &xhat);
  NormGrads r{Vec(x.size()), Vec(static_cast<size_t>(d), 0.0), Vec(static_cast<size_t>(d), 0.0)};
  const double dd = static_cast<double>(d);
  for (int64_t row = 0; row < rows; ++row) {
    double mu = 0, var = 0, mean_u = 0, mean_ux = 0;
    for (int64_t j = 0; j < d; ++j) mu += x[row * d + j] / dd;
    for (int64_t j = 0; j < d; ++j) var += (x[row * d + j] - mu) * (x[row * d + j] - mu) / dd;
    const double inv = 1 / std::sqrt(var + eps);
    for (int64_t j = 0; j < d; ++j) {
      const double u = g[row * d + j] * w[j];
      mean_u += u / dd;
      mean_ux += u * xhat[row * d + j] / dd;
      r.dw[j] += g[row * d + j] * xhat[row * d + j];
      r.db[j] += g[row * d + j];
    }
    for (int64_t j = 0; j < d; ++j)
      r.dx[row * d + j] = inv * (g[row * d + j] * w[j] - mean_u - xhat[row * d + j] * mean_ux);
  }
  return r;
}
inline Vec rms_norm(const Vec& x, const Vec& w, int64_t rows, int64_t d, double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < d; ++j) ms += x[r * d + j] * x[r * d + j];
    const double inv = 1 / std::sqrt(ms / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] * inv * w[j];
  }
  return y;
}
inline NormGrads rms_norm_backward(const Vec& x, const Vec& w, const Vec& g, int64_t rows, int64_t d, double eps) {
  NormGrads r{Vec(x.size()), Vec(static_cast<size_t>(d), 0.0), {}};
  const double dd = static_cast<double>(d);
  for (int64_t row = 0; row < rows; ++row) {
    double ms = 0, mean_ux = 0;
    for (int64_t j = 0; j < d; ++j) ms += x[row * d + j] * x[row * d + j] / dd;
    const double inv = 1 / std::sqrt(ms + eps);
    for (int64_t j = 0; j < d; ++j) {
      const double xhat = x[row * d + j] * inv;
      mean_ux += g[row * d + j] * w[j] * xhat / dd;
      r.dw[j] += g[row * d + j] * xhat;
    }
    for (int64_t j = 0; j < d; ++j) r.dx[row * d + j] = inv * (g[row * d + j] * w[j] - x[row * d + j] * inv * mean_ux);
  }
  return r;
}

// cross entropy with sum reduction over rows of logits z[rows,V]:
// loss = sum_r logsumexp(z_r) - z_r[t_r]; dz = softmax(z) - onehot(t).
struct Loss { double loss; Vec dz; };
inline Loss cross_entropy_sum(const Vec& z, const std::vector<int64_t>& targets, int64_t rows, int64_t V) {
  const Vec p = softmax(z, rows, V);
  Loss l{0.0, p};
  for (int64_t r = 0; r < rows; ++r) {
    l.loss -= std::log(p[r * V + targets[r]]);
    l.dz[r * V + targets[r]] -= 1;
  }
  return l;
}

}  // namespace mantissa::ref
