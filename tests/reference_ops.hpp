// Plain float64 loops: forward and backward of every op unit scaling
// covers, written independently of the engine so that the scale rules can be
// checked against them (empirically and against the unit-scaling goldens).
// Row-major; shapes named in each comment. Backward functions return the
// gradient of sum(g * f(x)) with respect to each input (no scaling).
#pragma once

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

// attention for `heads` independent [S,D] slices: O = softmax(c Q K^T + mask) V.
struct Attention { Vec out, probs; };
inline Attention attention(const Vec& q, const Vec& k, const Vec& v, int64_t heads, int64_t S, int64_t D, double c, bool causal) {
  Attention a{Vec(q.size(), 0.0), Vec(static_cast<size_t>(heads * S * S), 0.0)};
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t o = h * S * D, po = h * S * S;
    for (int64_t i = 0; i < S; ++i) {
      const int64_t last = causal ? i : S - 1;
      double mx = -INFINITY;
      Vec l(static_cast<size_t>(last + 1));
      for (int64_t j = 0; j <= last; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < D; ++e) dot += q[o + i * D + e] * k[o + j * D + e];
        l[j] = c * dot;
        mx = std::max(mx, l[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j <= last; ++j) sum += l[j] = std::exp(l[j] - mx);
      for (int64_t j = 0; j <= last; ++j) {
        const double p = l[j] / sum;
        a.probs[po + i * S + j] = p;
        for (int64_t e = 0; e < D; ++e) a.out[o + i * D + e] += p * v[o + j * D + e];
      }
    }
  }
  return a;
}
struct AttentionGrads { Vec dq, dk, dv; };
inline AttentionGrads attention_backward(const Vec& q, const Vec& k, const Vec& v, const Vec& probs, const Vec& g, int64_t heads,
                                         int64_t S, int64_t D, double c) {
  AttentionGrads r{Vec(q.size(), 0.0), Vec(q.size(), 0.0), Vec(q.size(), 0.0)};
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t o = h * S * D, po = h * S * S;
    for (int64_t i = 0; i < S; ++i) {
      Vec dp(static_cast<size_t>(S), 0.0);
      double dot = 0;
      for (int64_t j = 0; j < S; ++j) {
        const double p = probs[po + i * S + j];
        for (int64_t e = 0; e < D; ++e) {
          dp[j] += g[o + i * D + e] * v[o + j * D + e];
          r.dv[o + j * D + e] += p * g[o + i * D + e];
        }
        dot += p * dp[j];
      }
      for (int64_t j = 0; j < S; ++j) {
        const double dl = c * probs[po + i * S + j] * (dp[j] - dot);  // masked entries have p = 0
        for (int64_t e = 0; e < D; ++e) {
          r.dq[o + i * D + e] += dl * k[o + j * D + e];
          r.dk[o + j * D + e] += dl * q[o + i * D + e];
        }
      }
    }
  }
  return r;
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
