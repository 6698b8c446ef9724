// Float64 reference of multi-head attention on qkv [B, T, 3C], causal or
// key-padded, shared by the blockwise attention tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace mantissa::kernels::test {

struct Shape {
  int64_t B, T, C, NH;
  int64_t hs() const { return C / NH; }
  size_t qkv() const { return static_cast<size_t>(B * T * 3 * C); }
  size_t out() const { return static_cast<size_t>(B * T * C); }
  size_t rows() const { return static_cast<size_t>(B * NH * T); }
};

struct Ref {
  std::vector<double> out, lse, dqkv;
};

// Float64, naive per head: scores, masked softmax, output, lse and the
// gradient of sum(out * g) with respect to qkv. Row t of sequence b keeps keys
// 0..t (causal, key_len empty) or 0..key_len[b]-1 (right padding).
inline Ref reference(const Shape& s, const std::vector<double>& qkv, const std::vector<float>& g,
                     const std::vector<int32_t>& key_len = {}) {
  const int64_t B = s.B, T = s.T, C = s.C, NH = s.NH, hs = s.hs();
  Ref r;
  r.out.assign(s.out(), 0.0);
  r.lse.assign(s.rows(), 0.0);
  r.dqkv.assign(s.qkv(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  auto q = [&](int64_t b, int64_t t, int64_t h) { return &qkv[static_cast<size_t>((b * T + t) * 3 * C + h * hs)]; };
  auto k = [&](int64_t b, int64_t t, int64_t h) { return q(b, t, h) + C; };
  auto v = [&](int64_t b, int64_t t, int64_t h) { return q(b, t, h) + 2 * C; };
  auto d = [&](int64_t b, int64_t t, int64_t h, int64_t part) {
    return &r.dqkv[static_cast<size_t>((b * T + t) * 3 * C + part * C + h * hs)];
  };
  std::vector<double> p(static_cast<size_t>(T)), dp(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const int64_t n = key_len.empty() ? t + 1 : key_len[static_cast<size_t>(b)];
        double mx = -1e300;
        for (int64_t u = 0; u < n; ++u) {
          double dot = 0;
          for (int64_t i = 0; i < hs; ++i) dot += q(b, t, h)[i] * k(b, u, h)[i];
          p[u] = dot * scale;
          mx = std::max(mx, p[u]);
        }
        double sum = 0;
        for (int64_t u = 0; u < n; ++u) sum += std::exp(p[u] - mx);
        r.lse[static_cast<size_t>((b * NH + h) * T + t)] = mx + std::log(sum);
        for (int64_t u = 0; u < n; ++u) p[u] = std::exp(p[u] - mx) / sum;
        const float* go = &g[static_cast<size_t>((b * T + t) * C + h * hs)];
        double* o = &r.out[static_cast<size_t>((b * T + t) * C + h * hs)];
        double rowdot = 0;
        for (int64_t u = 0; u < n; ++u) {
          dp[u] = 0;
          for (int64_t i = 0; i < hs; ++i) {
            o[i] += p[u] * v(b, u, h)[i];
            dp[u] += go[i] * v(b, u, h)[i];
            d(b, u, h, 2)[i] += p[u] * go[i];
          }
          rowdot += p[u] * dp[u];
        }
        for (int64_t u = 0; u < n; ++u) {
          const double ds = p[u] * (dp[u] - rowdot) * scale;
          for (int64_t i = 0; i < hs; ++i) {
            d(b, t, h, 0)[i] += ds * k(b, u, h)[i];
            d(b, u, h, 1)[i] += ds * q(b, t, h)[i];
          }
        }
      }
    }
  }
  return r;
}

}  // namespace mantissa::kernels::test
