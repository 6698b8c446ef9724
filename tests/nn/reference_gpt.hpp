// A float64 GPT-2 forward written straight from the definition (no shared
// code with the engine), for whole-model gradient checks.
#pragma once

#include <cmath>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include "reference_ops.hpp"

namespace reference {

using Vec = std::vector<double>;
using Params = std::map<std::string, Vec>;

struct GPTShape {
  int64_t V, C, L, NH;
  bool post_norm = false;  // GPT-1 blocks: x = ln_1(x + attn(x)), x = ln_2(x + mlp(x)), no ln_f
};

// y [N, out] = x [N, in] @ w [in, out] + b
inline Vec linear(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t in, int64_t out) {
  Vec y(N * out);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < in; ++i) s += x[n * in + i] * w[i * out + o];
      y[n * out + o] = s;
    }
  return y;
}

inline Vec layer_norm(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C) {
  Vec y(N * C);
  for (int64_t r = 0; r < N; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mean += x[r * C + c];
    mean /= C;
    for (int64_t c = 0; c < C; ++c) var += (x[r * C + c] - mean) * (x[r * C + c] - mean);
    var /= C;
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = (x[r * C + c] - mean) * rstd * w[c] + b[c];
  }
  return y;
}

inline double gelu(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// qkv [B, T, 3C] -> [B, T, C], causal.
inline Vec attention(const Vec& qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  return mantissa::ref::fused_attention(qkv, B, T, C, NH).out;
}

// Sum over rows with target >= 0 of -log softmax(logits)[target].
inline double cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t V) {
  double loss = 0;
  for (size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] < 0) continue;
    double m = -1e300, z = 0;
    for (int64_t c = 0; c < V; ++c) m = std::max(m, logits[r * V + c]);
    for (int64_t c = 0; c < V; ++c) z += std::exp(logits[r * V + c] - m);
    loss += m + std::log(z) - logits[r * V + targets[r]];
  }
  return loss;
}

// Summed cross-entropy of a GPT-2 (HF names; post-norm: GPT-1's blocks) on ids/targets [B, T].
inline double gpt_loss(const Params& p, const GPTShape& s, const std::vector<int32_t>& ids,
                       const std::vector<int32_t>& targets, int64_t B, int64_t T) {
  const int64_t C = s.C, N = B * T;
  auto P = [&](const std::string& n) -> const Vec& { return p.at(n); };
  Vec x(N * C);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c)
      x[i * C + c] = P("transformer.wte.weight")[ids[i] * C + c] + P("transformer.wpe.weight")[(i % T) * C + c];
  for (int64_t l = 0; l < s.L; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    auto ln = [&](const Vec& v, const char* name) {
      return layer_norm(v, P(h + name + ".weight"), P(h + name + ".bias"), N, C);
    };
    Vec a = s.post_norm ? x : ln(x, "ln_1");
    Vec qkv = linear(a, P(h + "attn.c_attn.weight"), P(h + "attn.c_attn.bias"), N, C, 3 * C);
    Vec att = attention(qkv, B, T, C, s.NH);
    Vec proj = linear(att, P(h + "attn.c_proj.weight"), P(h + "attn.c_proj.bias"), N, C, C);
    for (int64_t i = 0; i < N * C; ++i) x[i] += proj[i];
    if (s.post_norm) x = ln(x, "ln_1");
    Vec m = s.post_norm ? x : ln(x, "ln_2");
    Vec f = linear(m, P(h + "mlp.c_fc.weight"), P(h + "mlp.c_fc.bias"), N, C, 4 * C);
    for (double& v : f) v = gelu(v);
    Vec y = linear(f, P(h + "mlp.c_proj.weight"), P(h + "mlp.c_proj.bias"), N, 4 * C, C);
    for (int64_t i = 0; i < N * C; ++i) x[i] += y[i];
    if (s.post_norm) x = ln(x, "ln_2");
  }
  if (!s.post_norm) x = layer_norm(x, P("transformer.ln_f.weight"), P("transformer.ln_f.bias"), N, C);
  Vec logits(N * s.V);
  const Vec& wte = P("transformer.wte.weight");
  for (int64_t i = 0; i < N; ++i)
    for (int64_t v = 0; v < s.V; ++v) {
      double d = 0;
      for (int64_t c = 0; c < C; ++c) d += x[i * C + c] * wte[v * C + c];
      logits[i * s.V + v] = d;
    }
  return cross_entropy(logits, targets, s.V);
}

}  // namespace reference
