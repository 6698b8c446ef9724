// Rotary qkv with grouped heads: forward against a float64 re-implementation
// written from the definition, backward against float64 central finite
// differences of it.
#include <cmath>

#include "autograd/gradcheck.hpp"
#include "mantissa/autograd/ops_rotary.hpp"

using namespace gradcheck;

namespace {

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

// qkv = [rope(q), repeat(rope(k)), repeat(v)] with 4 query heads on 2 kv heads.
TEST(OpsRotary, RotaryQkvGrouped) {
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

TEST(OpsRotary, RotaryQkvRejectsBadHeads) {
  ag::Tape t;
  ag::Var q = t.leaf(mantissa::Tensor::zeros({1, 2, 12})), k = t.leaf(mantissa::Tensor::zeros({1, 2, 12}));
  EXPECT_THROW(ag::rotary_qkv(t, q, k, k, 4, 3, 1e4), std::invalid_argument);  // 4 heads on 3 kv heads
  EXPECT_THROW(ag::rotary_qkv(t, q, k, k, 4, 4, 1e4), std::invalid_argument);  // k is 12 wide, 4 heads of 3: odd D
  EXPECT_THROW(ag::rotary_qkv(t, q, k, k, 2, 1, 1e4), std::invalid_argument);  // 1 kv head of 6 wants k [1, 2, 6]
}
