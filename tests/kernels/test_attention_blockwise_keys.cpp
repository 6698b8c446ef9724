// Blockwise key-padded (BERT) attention against a float64 recomputation
// (forward, log-sum-exp, every input gradient) and against the whole-scores
// key-padded kernels, under padding patterns that reach the block structure:
// a full sequence, a fully padded tail of query blocks, a row with one valid
// key, every sequence shorter than T; lengths not a multiple of the block.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention_reference.hpp"
#include "kernels/reference.hpp"
#include "mantissa/autograd/ops_padded_attention.hpp"
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

// Forward + backward through the blockwise kernels; lse has guard values on
// both sides (exactly B*NH*T floats are written), dqkv starts at `init`.
Outputs blockwise(const Shape& s, const std::vector<int32_t>& len, const std::vector<float>& qkv,
                  const std::vector<float>& g, bool bf16, float init) {
  Outputs r;
  r.out.assign(s.out(), 7.0f);
  std::vector<float> guarded(s.rows() + 2, -3.0f);
  attention_forward_keys_blockwise(r.out.data(), guarded.data() + 1, qkv.data(), len.data(), s.B, s.T, s.C, s.NH,
                                   bf16);
  EXPECT_EQ(guarded.front(), -3.0f);
  EXPECT_EQ(guarded.back(), -3.0f);
  r.lse.assign(guarded.begin() + 1, guarded.end() - 1);
  r.dqkv.assign(s.qkv(), init);
  attention_backward_keys_blockwise(r.dqkv.data(), g.data(), qkv.data(), r.lse.data(), len.data(), s.B, s.T, s.C,
                                    s.NH, bf16);
  return r;
}

Outputs whole_scores(const Shape& s, const std::vector<int32_t>& len, const std::vector<float>& qkv,
                     const std::vector<float>& g, bool bf16, float init) {
  Outputs r;
  r.out.assign(s.out(), 7.0f);
  std::vector<float> att(s.rows() * static_cast<size_t>(s.T)), datt(att.size());
  attention_forward_keys(r.out.data(), att.data(), qkv.data(), len.data(), s.B, s.T, s.C, s.NH, bf16);
  r.dqkv.assign(s.qkv(), init);
  attention_backward_keys(r.dqkv.data(), datt.data(), g.data(), qkv.data(), att.data(), len.data(), s.B, s.T, s.C,
                          s.NH, bf16);
  return r;
}

// The k and v gradient of every padded key is exactly what the caller put there.
void expect_padded_keys_untouched(const Shape& s, const std::vector<int32_t>& len, const std::vector<float>& dqkv,
                                  float init) {
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = len[static_cast<size_t>(b)]; t < s.T; ++t)
      for (int64_t c = s.C; c < 3 * s.C; ++c)
        ASSERT_EQ(dqkv[static_cast<size_t>((b * s.T + t) * 3 * s.C + c)], init) << "b=" << b << " t=" << t;
}

void check_fp32_against_float64(const Shape& s, const std::vector<int32_t>& len, uint32_t seed) {
  std::string lens;
  for (int32_t n : len) lens.append(" ").append(std::to_string(n));
  SCOPED_TRACE("B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
               " key lengths" + lens);
  auto qkv = random_floats(s.qkv(), seed, -1.5f, 1.5f);
  auto g = random_floats(s.out(), seed + 1);
  const Ref want = reference(s, test::to_double(qkv), g, len);
  const Outputs got = blockwise(s, len, qkv, g, false, 0.25f);
  const double bound = 4 * (s.T + s.hs()) * kEps32 * 4;
  test::expect_near_all(got.out, want.out, 0, bound, "out");
  test::expect_near_all(got.lse, want.lse, 0, bound, "lse");
  auto shifted = want.dqkv;
  for (auto& x : shifted) x += 0.25;
  test::expect_near_all(got.dqkv, shifted, 0, bound, "dqkv");
  expect_padded_keys_untouched(s, len, got.dqkv, 0.25f);
}

TEST(AttentionBlockwiseKeys, Fp32MatchesFloat64UnderPaddingPatterns) {
  const int64_t block = attention_block_rows();
  const int64_t T = 2 * block + 7;  // partial last block
  // full | all query blocks after the first are padded | one valid key | one short of a block edge
  check_fp32_against_float64({4, T, 48, 3}, {static_cast<int32_t>(T), static_cast<int32_t>(block - 3), 1,
                                             static_cast<int32_t>(2 * block - 1)},
                             71);
  // every sequence shorter than T: the keys past the longest are never read
  check_fp32_against_float64({2, T, 32, 2}, {static_cast<int32_t>(block + 1), 5}, 72);
  check_fp32_against_float64({1, block - 5, 32, 4}, {1}, 73);  // one key, shorter than a block
  check_fp32_against_float64({3, 1, 16, 2}, {1, 1, 1}, 74);    // one token
}

// The whole-scores key-padded path and the blockwise one compute the same
// function: at fp32 they agree to rounding; under bf16 products both round
// the same operands (q, k, v, dout, P, dS) and agree to a few bf16 units.
TEST(AttentionBlockwiseKeys, AgreesWithStoredProbabilitiesPath) {
  const int64_t block = attention_block_rows();
  const Shape s{3, 2 * block + 19, 96, 3};
  const std::vector<int32_t> len = {static_cast<int32_t>(s.T), 1, static_cast<int32_t>(block + 2)};
  auto qkv = random_floats(s.qkv(), 81, -1.5f, 1.5f);
  auto g = random_floats(s.out(), 82);
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 products" : "fp32");
    const Outputs a = blockwise(s, len, qkv, g, bf16, 0.5f), b = whole_scores(s, len, qkv, g, bf16, 0.5f);
    const double out_tol = bf16 ? 2.0 / 256 : 64 * kEps32;
    test::expect_near_all(a.out, test::to_double(b.out), 0, out_tol, "out");
    double scale = 0;
    for (float x : b.dqkv) scale = std::max(scale, std::abs(static_cast<double>(x) - 0.5));
    test::expect_near_all(a.dqkv, test::to_double(b.dqkv), 0, (bf16 ? 2.0 / 256 : 1e-5) * scale, "dqkv");
    expect_padded_keys_untouched(s, len, a.dqkv, 0.5f);
  }
}

// bf16 products against float64 on the bf16-rounded qkv (bounds as for the
// causal kernel: P and dS rounded once each, relative 2^-8 per term).
TEST(AttentionBlockwiseKeys, Bf16ProductsMatchRoundedFloat64) {
  const Shape s{2, attention_block_rows() + 37, 128, 2};
  const std::vector<int32_t> len = {static_cast<int32_t>(s.T - 30), 2};
  auto qkv = random_floats(s.qkv(), 91, -1.5f, 1.5f);
  auto g = random_floats(s.out(), 92);
  std::vector<double> rounded(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) rounded[i] = test::round_to_bf16(qkv[i]);
  const Ref want = reference(s, rounded, g, len);
  const Outputs got = blockwise(s, len, qkv, g, true, 0.0f);
  test::expect_near_all(got.lse, want.lse, 0, 4 * (s.hs() + 8) * kEps32 * 3, "lse (bf16 products)");
  test::expect_near_all(got.out, want.out, 0, 1.5 / 256 + 1e-5, "out (bf16 products)");
  double scale = 0;
  for (double x : want.dqkv) scale = std::max(scale, std::abs(x));
  test::expect_near_all(got.dqkv, want.dqkv, 0, 4.0 / 256 * scale, "dqkv (bf16 products)");
  expect_padded_keys_untouched(s, len, got.dqkv, 0.0f);
}

// The BERT autograd op switches to the blockwise kernels from the threshold:
// its output and the vector-Jacobian product through it match float64.
TEST(AttentionBlockwiseKeys, AutogradOpUsesItForLongSequences) {
  int64_t T = 64;
  while (!attention_prefers_blockwise(1, T, 1, false, false)) T *= 2;
  const Shape s{2, T + 3, 8, 1};
  ASSERT_FALSE(attention_prefers_blockwise(s.B, T / 2, s.NH, false, false));
  const std::vector<int32_t> len = {static_cast<int32_t>(s.T - 70), 3};
  auto qkv = random_floats(s.qkv(), 101, -1.5f, 1.5f);
  auto g = random_floats(s.out(), 102);
  const Ref want = reference(s, test::to_double(qkv), g, len);
  namespace ag = mantissa::autograd;
  ag::Tape tape;
  ag::Var x = tape.leaf(Tensor::from(qkv, {s.B, s.T, 3 * s.C}));
  Tensor lens = Tensor::empty({s.B}, DType::i32);
  std::copy(len.begin(), len.end(), lens.data<int32_t>());
  ag::Var y = ag::key_padded_self_attention(tape, x, s.NH, lens);
  tape.backward(y, Tensor::from(g, {s.B, s.T, s.C}));
  const float* yp = y.value.f32();
  const float* dp = x.node->grad.f32();
  const double bound = 4 * (s.T + s.hs()) * kEps32 * 4;
  test::expect_near_all(std::vector<float>(yp, yp + s.out()), want.out, 0, bound, "autograd out");
  test::expect_near_all(std::vector<float>(dp, dp + s.qkv()), want.dqkv, 0, bound, "autograd dqkv");
}

TEST(AttentionBlockwiseKeys, ThresholdAndBadKeyLengths) {
  // Key-padded attention has no masked half to skip: it goes blockwise later than causal.
  EXPECT_TRUE(attention_prefers_blockwise(1, 512, 4, false, true));
  EXPECT_FALSE(attention_prefers_blockwise(1, 1024, 4, false, false));
  EXPECT_FALSE(attention_prefers_blockwise(1, 1024, 4, true, false));
  EXPECT_TRUE(attention_prefers_blockwise(1, 2048, 4, false, false));
  EXPECT_TRUE(attention_prefers_blockwise(1, 2048, 4, true, false));
  EXPECT_FALSE(attention_prefers_blockwise(8, 512, 12, false, false));  // 96 MiB of fp32 scores: whole
  EXPECT_TRUE(attention_prefers_blockwise(32, 512, 12, false, false));  // 384 MiB: blockwise
  std::vector<float> buf(2 * 4 * 3 * 8, 0.0f);
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{4, 0}, std::vector<int32_t>{5, 4}}) {
    try {
      attention_forward_keys_blockwise(buf.data(), buf.data(), buf.data(), bad.data(), 2, 4, 8, 2);
      ADD_FAILURE() << "no exception";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("key length"), std::string::npos) << e.what();
    }
    EXPECT_THROW(attention_backward_keys_blockwise(buf.data(), buf.data(), buf.data(), buf.data(), bad.data(), 2, 4, 8,
                                                   2),
                 std::invalid_argument);
  }
}

}  // namespace
}  // namespace mantissa::kernels
