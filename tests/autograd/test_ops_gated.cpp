// The gated feed-forward ops (SwiGLU, per-channel scale): forward against
// float64 re-implementations written from the definitions, backward against
// float64 central finite differences of them.
#include <cmath>

#include "autograd/gradcheck.hpp"
#include "mantissa/autograd/ops_gated.hpp"

using namespace gradcheck;

namespace {

double silu64(double g) { return g / (1.0 + std::exp(-g)); }

}  // namespace

TEST(OpsGated, SwiGLU) {
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
TEST(OpsGated, SwiGLUScales) {
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

TEST(OpsGated, ScaleChannels) {
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
