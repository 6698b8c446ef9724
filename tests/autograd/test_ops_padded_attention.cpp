// Bidirectional attention over right-padded sequences: forward against the float64
// attention of reference_ops.hpp (scores / sqrt(d_head), keys at or past the row's length
// masked out, softmax, weighted values), backward against float64 central finite
// differences of it; the padded keys' q/k/v rows get exactly zero gradient.
#include <algorithm>
#include <cmath>

#include "autograd/gradcheck.hpp"
#include "mantissa/autograd/ops_padded_attention.hpp"
#include "reference_ops.hpp"

using namespace gradcheck;

namespace {

Tensor lengths(const std::vector<int32_t>& len) {
  Tensor t = Tensor::empty({static_cast<int64_t>(len.size())}, mantissa::DType::i32);
  std::copy(len.begin(), len.end(), t.data<int32_t>());
  return t;
}

}  // namespace

TEST(OpsPaddedAttention, KeyPaddedAttentionMatchesReferenceAndFiniteDifferences) {
  const int64_t B = 3, T = 5, C = 8, H = 2;
  const std::vector<int32_t> len = {5, 3, 1};  // full, padded, one key
  Tensor lens = lengths(len);
  check("key_padded_self_attention", {{{B, T, 3 * C}, random_vec(B * T * 3 * C, 7, -2, 2)}},
        [&](const std::vector<Vec>& v) { return mantissa::ref::fused_attention(v[0], B, T, C, H, len).out; },
        [&](ag::Tape& t, std::vector<ag::Var>& x) { return ag::key_padded_self_attention(t, x[0], H, lens); });
}

TEST(OpsPaddedAttention, PaddedKeysGetNoGradient) {
  const int64_t B = 2, T = 6, C = 4, H = 1;
  const std::vector<int32_t> len = {6, 2};
  ag::Tape t;
  ag::Var qkv = t.leaf(to_tensor({B, T, 3 * C}, random_vec(B * T * 3 * C, 3)));
  // Only the outputs of row 1's real positions carry a loss gradient.
  ag::Var y = ag::key_padded_self_attention(t, qkv, H, lengths(len));
  Vec r(static_cast<size_t>(B * T * C), 0.0);
  for (int64_t i = 0; i < 2 * C; ++i) r[static_cast<size_t>(T * C + i)] = 1.0 + static_cast<double>(i);
  t.backward(y, to_tensor(y.shape(), r));
  const std::vector<float> g = qkv.node->grad.to_vector();
  for (int64_t p = 2; p < T; ++p)
    for (int64_t c = 0; c < 3 * C; ++c) EXPECT_EQ(g[static_cast<size_t>((T + p) * 3 * C + c)], 0.0f) << p << " " << c;
  double real = 0;
  for (int64_t c = C; c < 3 * C; ++c) real += std::abs(g[static_cast<size_t>((T + 1) * 3 * C + c)]);
  EXPECT_GT(real, 0.0) << "the real keys and values do get gradients";
}

TEST(OpsPaddedAttention, KeyLengthsOutsideTheRowAreRefused) {
  ag::Tape t;
  ag::Var qkv = t.leaf(to_tensor({1, 4, 12}, random_vec(48, 1)));
  EXPECT_THROW(ag::key_padded_self_attention(t, qkv, 2, lengths({0})), std::invalid_argument);
  EXPECT_THROW(ag::key_padded_self_attention(t, qkv, 2, lengths({5})), std::invalid_argument);
  EXPECT_THROW(ag::key_padded_self_attention(t, qkv, 2, lengths({4, 4})), std::invalid_argument);
}
