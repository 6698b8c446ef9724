// Blockwise attention against a float64 recomputation (forward, log-sum-exp and
// every input gradient) and against the whole-scores kernels, at lengths that
// are not a multiple of the block, several heads, fp32 and bf16 products.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/attention_reference.hpp"
#include "kernels/reference.hpp"
#include "mantissa/autograd/ops.hpp"
#include "mantissa/autograd/tape.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace mantissa::kernels {
namespace {

using test::kEps32;
using test::random_floats;
using test::Ref;
using test::reference;
using test::Shape;

struct Outputs {
  std::vector<float> out, lse, dqkv;
};

// Forward + backward through the blockwise kernels. lse has guard values on
// both sides: exactly B*NH*T floats are saved for backward, nothing more.
Outputs blockwise(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& g, bool bf16, float init) {
  Outputs r;
  r.out.assign(s.out(), 7.0f);
  std::vector<float> guarded(s.rows() + 2, -3.0f);
  attention_forward_blockwise(r.out.data(), guarded.data() + 1, qkv.data(), s.B, s.T, s.C, s.NH, bf16);
  EXPECT_EQ(guarded.front(), -3.0f);
  EXPECT_EQ(guarded.back(), -3.0f);
  r.lse.assign(guarded.begin() + 1, guarded.end() - 1);
  r.dqkv.assign(s.qkv(), init);
  attention_backward_blockwise(r.dqkv.data(), g.data(), qkv.data(), r.lse.data(), s.B, s.T, s.C, s.NH, bf16);
  return r;
}

Outputs whole_scores(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& g, bool bf16, float init) {
  Outputs r;
  r.out.assign(s.out(), 7.0f);
  std::vector<float> att(s.rows() * static_cast<size_t>(s.T)), datt(att.size());
  attention_forward(r.out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, bf16);
  r.dqkv.assign(s.qkv(), init);
  attention_backward(r.dqkv.data(), datt.data(), g.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH, bf16);
  return r;
}

// fp32: every output, lse and gradient within an fp32 accumulation bound of
// float64, the gradient accumulated into the caller's buffer.
void check_fp32_against_float64(const Shape& s, uint32_t seed) {
  SCOPED_TRACE("B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
               " NH=" + std::to_string(s.NH));
  auto qkv = random_floats(s.qkv(), seed, -1.5f, 1.5f);
  auto g = random_floats(s.out(), seed + 1);
  const Ref want = reference(s, test::to_double(qkv), g);
  const Outputs got = blockwise(s, qkv, g, false, 0.25f);
  const double bound = 4 * (s.T + s.hs()) * kEps32 * 4;
  test::expect_near_all(got.out, want.out, 0, bound, "out");
  test::expect_near_all(got.lse, want.lse, 0, bound, "lse");
  test::expect_near_all(got.dqkv, [&] {
    auto w = want.dqkv;
    for (auto& x : w) x += 0.25;
    return w;
  }(), 0, bound, "dqkv");
}

TEST(AttentionBlockwise, Fp32MatchesFloat64AtOddLengths) {
  const int64_t block = attention_block_rows();
  check_fp32_against_float64({2, 2 * block + 7, 48, 3}, 31);  // partial last block, 3 heads
  check_fp32_against_float64({1, block - 5, 32, 2}, 32);      // shorter than one block
  check_fp32_against_float64({3, 1, 16, 4}, 33);              // one token
  check_fp32_against_float64({1, block + 1, 64, 1}, 34);      // one head, one-row last block
}

// The whole-scores path and the blockwise one compute the same function: at
// fp32 they agree to rounding; at bf16 products both round the same operands
// (q, k, v, dout, P, dS), so they agree to a few bf16 units of the scale.
TEST(AttentionBlockwise, AgreesWithWholeScoresPath) {
  const Shape s{2, 2 * attention_block_rows() + 19, 96, 3};
  auto qkv = random_floats(s.qkv(), 41, -1.5f, 1.5f);
  auto g = random_floats(s.out(), 42);
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 products" : "fp32");
    const Outputs a = blockwise(s, qkv, g, bf16, 0.5f), b = whole_scores(s, qkv, g, bf16, 0.5f);
    const double out_tol = bf16 ? 2.0 / 256 : 64 * kEps32;
    test::expect_near_all(a.out, test::to_double(b.out), 0, out_tol, "out");
    double scale = 0;
    for (float x : b.dqkv) scale = std::max(scale, std::abs(static_cast<double>(x) - 0.5));
    test::expect_near_all(a.dqkv, test::to_double(b.dqkv), 0, (bf16 ? 2.0 / 256 : 1e-5) * scale, "dqkv");
  }
}

// bf16 products against float64 on the bf16-rounded qkv: the scores (and so
// lse) see only fp32 accumulation; the output sees P rounded to bf16
// (relative 2^-8 per term, sum P = 1, |v| <= 1.5: |err| <= 1.5 * 2^-8); the
// gradient sees dout, P and dS rounded once each (relative 2^-8 per term,
// measured against the gradient's scale).
TEST(AttentionBlockwise, Bf16ProductsMatchRoundedFloat64) {
  const Shape s{2, attention_block_rows() + 37, 128, 2};
  auto qkv = random_floats(s.qkv(), 51, -1.5f, 1.5f);
  auto g = random_floats(s.out(), 52);
  std::vector<double> rounded(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) rounded[i] = test::round_to_bf16(qkv[i]);
  const Ref want = reference(s, rounded, g);
  const Outputs got = blockwise(s, qkv, g, true, 0.0f);
  test::expect_near_all(got.lse, want.lse, 0, 4 * (s.hs() + 8) * kEps32 * 3, "lse (bf16 products)");
  test::expect_near_all(got.out, want.out, 0, 1.5 / 256 + 1e-5, "out (bf16 products)");
  double scale = 0;
  for (double x : want.dqkv) scale = std::max(scale, std::abs(x));
  test::expect_near_all(got.dqkv, want.dqkv, 0, 4.0 / 256 * scale, "dqkv (bf16 products)");
  // The rounding really happened: against the unrounded qkv the gradient differs.
  const Ref exact = reference(s, test::to_double(qkv), g);
  double max_diff = 0;
  for (size_t i = 0; i < exact.dqkv.size(); ++i)
    max_diff = std::max(max_diff, std::abs(got.dqkv[i] - exact.dqkv[i]));
  EXPECT_GT(max_diff, 1e-5 * scale);
}

// The autograd op switches to the blockwise kernels for long sequences: its
// output and the vector-Jacobian product through it match float64.
TEST(AttentionBlockwise, AutogradOpUsesItForLongSequences) {
  const Shape s{1, 520, 32, 2};
  ASSERT_TRUE(attention_prefers_blockwise(s.B, s.T, s.NH));
  auto qkv = random_floats(s.qkv(), 61, -1.5f, 1.5f);
  auto g = random_floats(s.out(), 62);
  const Ref want = reference(s, test::to_double(qkv), g);
  namespace ag = mantissa::autograd;
  ag::Tape tape;
  ag::Var x = tape.leaf(Tensor::from(qkv, {s.B, s.T, 3 * s.C}));
  ag::Var y = ag::causal_self_attention(tape, x, s.NH);
  tape.backward(y, Tensor::from(g, {s.B, s.T, s.C}));
  const float* yp = y.value.f32();
  const float* dp = x.node->grad.f32();
  const double bound = 4 * (s.T + s.hs()) * kEps32 * 4;
  test::expect_near_all(std::vector<float>(yp, yp + s.out()), want.out, 0, bound, "autograd out");
  test::expect_near_all(std::vector<float>(dp, dp + s.qkv()), want.dqkv, 0, bound, "autograd dqkv");
}

TEST(AttentionBlockwise, ThresholdAndBadShapes) {
  EXPECT_FALSE(attention_prefers_blockwise(16, 128, 4));
  EXPECT_TRUE(attention_prefers_blockwise(1, 512, 4));
  EXPECT_FALSE(attention_prefers_blockwise(1, 512, 4, true));
  EXPECT_TRUE(attention_prefers_blockwise(1, 1024, 4, true));
  EXPECT_FALSE(attention_prefers_blockwise(64, 256, 16, true));  // 128 MiB of bf16 scores: whole
  EXPECT_TRUE(attention_prefers_blockwise(256, 256, 16, true)); // 512 MiB: blockwise
  std::vector<float> buf(3 * 10);
  EXPECT_THROW(attention_forward_blockwise(buf.data(), buf.data(), buf.data(), 1, 1, 10, 3), std::invalid_argument);
  EXPECT_THROW(attention_backward_blockwise(buf.data(), buf.data(), buf.data(), buf.data(), 1, 0, 9, 3),
               std::invalid_argument);
}

}  // namespace
}  // namespace mantissa::kernels
