// The Llama ops (SwiGLU, rotary qkv with grouped heads, per-channel scale):
// forward against float64 re-implementations written from the definitions,
// backward against float64 central finite differences of them.
#include <cmath>

#include "autograd/gradcheck.hpp"
#include "mantissa/autograd/ops_llama.hpp"

using namespace gradcheck;

namespace {

double silu64(double g) { return g / (1.0 + std::exp(-g)); }

// rotate_half RoPE of one [.., T, H*D] tensor, positions 0..T-1, in float64.
Vec ref_rope(const Vec& x, int64_t B, int64_t T, int64_t H, int64_t D, double theta) {
  Vec y(x.size());
  const int64_t half = D / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < T; ++p)
      for (int64_t h = 0; h < H; ++h) {
        const size_t base = static_cast<size_t>(((b * T + p) * H + h) * D);
        for (int64_t i = 0; i < D; ++i) {
          const int64_t j = i % half;
          const double a = static_cast<double>(p) * std::pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(D));
          const double rot = i < half ? -x[base + static_cast<size_t>(i + half)] : x[base + static_cast<size_t>(i - half)];
          y[base + static_cast<size_t>(i)] = x[base + static_cast<size_t>(i)] * std::cos(a) + rot * std::sin(a);
        }
      }
  return y;
}

}  // namespace

TEST(OpsLlama, SwiGLU) {
  const int64_t N = 6, F = 5;
  check("swiglu", {{{N, F}, random_vec(N * F, 1, -3, 3)}, {{N, F}, random_vec(N * F, 2)}},
        [&](const std::vector<Vec>& v) {
          Vec y(v[0].size());
          for (size_t i = 0; i < y.size(); ++i) y[i] = silu64(v[0][i]) * v[1][i];
          return y;
        },
        [](ag::Tape& t, std::vector<ag::Var>& x) { return ag::swiglu(t, x[0], x[1]); });
}

// alpha scales the output and the up gradient, beta the gate gradient only.
TEST(OpsLlama, SwiGLUScales) {
  const int64_t n = 7;
  ag::Tape t;
  const Vec g = random_vec(n, 3, -2, 2), u = random_vec(n, 4);
  ag::Var gv = t.leaf(to_tensor({n}, g)), uv = t.leaf(to_tensor({n}, u));
  ag::Var y = ag::swiglu(t, gv, uv, 1.5f, 0.25f);
  t.backward(y, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-g[i]));
    EXPECT_NEAR(y.value.f32()[i], 1.5 * silu64(g[i]) * u[i], 1e-6);
    EXPECT_NEAR(uv.node->grad.f32()[i], 1.5 * silu64(g[i]), 1e-6);
    EXPECT_NEAR(gv.node->grad.f32()[i], 0.25 * s * (1 + g[i] * (1 - s)) * u[i], 1e-6);
  }
}

// qkv = [rope(q), repeat(rope(k)), repeat(v)] with 4 query heads on 2 kv heads.
TEST(OpsLlama, RotaryQkvGrouped) {
  const int64_t B = 2, T = 5, H = 4, KV = 2, D = 6, C = H * D, KC = KV * D;
  const double theta = 100.0;  // large angles at small T: every pair really turns
  check("rotary_qkv",
        {{{B, T, C}, random_vec(B * T * C, 5)}, {{B, T, KC}, random_vec(B * T * KC, 6)},
         {{B, T, KC}, random_vec(B * T * KC, 7)}},
        [&](const std::vector<Vec>& v) {
          const Vec q = ref_rope(v[0], B, T, H, D, theta), k = ref_rope(v[1], B, T, KV, D, theta);
          Vec y(static_cast<size_t>(B * T * 3 * C));
          for (int64_t bt = 0; bt < B * T; ++bt)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t d = 0; d < D; ++d) {
                const size_t o = static_cast<size_t>(bt * 3 * C + h * D + d);
                const size_t kvi = static_cast<size_t>(bt * KC + (h / (H / KV)) * D + d);
                y[o] = q[static_cast<size_t>(bt * C + h * D + d)];
                y[o + static_cast<size_t>(C)] = k[kvi];
                y[o + static_cast<size_t>(2 * C)] = v[2][kvi];
              }
          return y;
        },
        [&](ag::Tape& t, std::vector<ag::Var>& x) { return ag::rotary_qkv(t, x[0], x[1], x[2], H, KV, theta); });
}

TEST(OpsLlama, RotaryQkvRejectsBadHeads) {
  ag::Tape t;
  ag::Var q = t.leaf(mantissa::Tensor::zeros({1, 2, 12})), k = t.leaf(mantissa::Tensor::zeros({1, 2, 12}));
  EXPECT_THROW(ag::rotary_qkv(t, q, k, k, 4, 3, 1e4), std::invalid_argument);  // 4 heads on 3 kv heads
  EXPECT_THROW(ag::rotary_qkv(t, q, k, k, 4, 4, 1e4), std::invalid_argument);  // k is 12 wide, 4 heads of 3: odd D
  EXPECT_THROW(ag::rotary_qkv(t, q, k, k, 2, 1, 1e4), std::invalid_argument);  // 1 kv head of 6 wants k [1, 2, 6]
}

TEST(OpsLlama, ScaleChannels) {
  const int64_t N = 4, C = 3;
  const Vec s = {0.5, 2.0, -4.0};
  check("scale_channels", {{{N, C}, random_vec(N * C, 8)}},
        [&](const std::vector<Vec>& v) {
          Vec y(v[0].size());
          for (size_t i = 0; i < y.size(); ++i) y[i] = v[0][i] * s[i % C];
          return y;
        },
        [&](ag::Tape& t, std::vector<ag::Var>& x) { return ag::scale_channels(t, x[0], to_tensor({C}, s)); });
}
