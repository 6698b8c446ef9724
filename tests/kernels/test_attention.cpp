// Causal multi-head attention against a float64 naive recomputation, the
// backward against the float64 analytic gradient and central differences;
// the fp32 products under every tier the host has (scalar: batched oneDNN
// products; avx2 and avx512: the fused register tiles of attention_fused.cpp),
// the bf16 products under every tier and bf16 route (the f32_widened route on
// avx2 and avx512 takes the fused tiles on rounded operands).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention_fused.hpp"
#include "kernels/reference.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/kernels/matmul_route.hpp"
#include "reference_ops.hpp"

namespace mantissa::kernels {
namespace {

using test::kEps32;
using test::random_floats;

struct Shape {
  int64_t B, T, C, NH;
  int64_t hs() const { return C / NH; }
};

// The tiers with their own fp32 attention path, up to what the host has.
std::vector<cpu::Isa> tiers() {
  std::vector<cpu::Isa> out;
  for (cpu::Isa isa : {cpu::Isa::scalar, cpu::Isa::avx2, cpu::Isa::avx512})
    if (isa <= cpu::detected_isa()) out.push_back(isa);
  return out;
}

// Sets a cap for one scope and restores the previous one.
struct Cap {
  explicit Cap(cpu::Isa isa) : before(cpu::max_isa()) { cpu::set_max_isa(isa); }
  ~Cap() { cpu::set_max_isa(before); }
  cpu::Isa before;
};

// Every way bf16 products run: each tier under each bf16 route the host has.
struct Bf16Path {
  cpu::Isa isa;
  Bf16Route route;
  std::string name() const { return std::string(cpu::isa_name(isa)) + "/" + route_name(route); }
};
std::vector<Bf16Path> bf16_paths() {
  std::vector<Bf16Path> out;
  for (cpu::Isa isa : tiers())
    for (Bf16Route r : {Bf16Route::f32_widened, Bf16Route::onednn_bf16})
      if (route_available(r)) out.push_back({isa, r});
  return out;
}

// Caps the tier and forces the route for one scope.
struct PathScope {
  explicit PathScope(const Bf16Path& p) : cap(p.isa) { set_bf16_route(p.route); }
  ~PathScope() { set_bf16_route(std::nullopt); }
  Cap cap;
};

void check_forward(const Shape& s, uint32_t seed) {
  auto qkv = random_floats(s.B * s.T * 3 * s.C, seed, -1.5f, 1.5f);
  const ref::Attention want = ref::fused_attention(test::to_double(qkv), s.B, s.T, s.C, s.NH);
  const std::vector<double>& att_ref = want.probs;
  const std::vector<double>& out_ref = want.out;
  // Scores: hs-term fp32 dots; probabilities inherit ~hs u absolute error on the
  // exponent; outputs are convex combinations of |v| <= 1.5 over T terms.
  const double tol_att = 4 * (s.hs() + 8) * kEps32 * 3;
  for (cpu::Isa isa : tiers()) {
    Cap cap(isa);
    const std::string where = cpu::isa_name(isa);
    std::vector<float> out(s.B * s.T * s.C, 7.0f), att(s.B * s.NH * s.T * s.T, 7.0f);
    attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    test::expect_near_all(att, att_ref, 0, tol_att, "att " + where);
    test::expect_near_all(out, out_ref, 0, 1.5 * tol_att + 4 * s.T * kEps32 * 1.5, "out " + where);
    // Causal: entries above the diagonal are exact zeros.
    for (int64_t r = 0; r < s.B * s.NH * s.T; ++r) {
      const int64_t t = r % s.T;
      for (int64_t u = t + 1; u < s.T; ++u) ASSERT_EQ(att[r * s.T + u], 0.0f) << where << " " << r << "," << u;
    }
  }
}

TEST(Attention, ForwardSmallMatchesFloat64) { check_forward({2, 7, 12, 3}, 1); }
TEST(Attention, ForwardModelSizeMatchesFloat64) { check_forward({2, 128, 256, 4}, 2); }
TEST(Attention, ForwardLargestSizeMatchesFloat64) { check_forward({1, 256, 768, 12}, 12); }

TEST(Attention, FutureTokensDoNotChangeThePast) {
  const Shape s{1, 16, 32, 4};
  auto qkv = random_floats(s.B * s.T * 3 * s.C, 3);
  std::vector<float> out1(s.T * s.C), out2(s.T * s.C), att(s.NH * s.T * s.T);
  attention_forward(out1.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  for (int64_t j = 10 * 3 * s.C; j < s.T * 3 * s.C; ++j) qkv[j] = -qkv[j] * 2.0f;  // change t >= 10
  attention_forward(out2.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  for (int64_t j = 0; j < 10 * s.C; ++j) ASSERT_EQ(out1[j], out2[j]) << j;
  bool changed = false;
  for (int64_t j = 10 * s.C; j < s.T * s.C; ++j) changed |= out1[j] != out2[j];
  EXPECT_TRUE(changed);
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  const Shape s{2, 5, 8, 2};
  auto qkv = random_floats(s.B * s.T * 3 * s.C, 4);
  auto g = random_floats(s.B * s.T * s.C, 5);
  auto qd = test::to_double(qkv);
  auto loss = [&]() {
    const std::vector<double> o = ref::fused_attention(qd, s.B, s.T, s.C, s.NH).out;
    double L = 0;
    for (size_t i = 0; i < o.size(); ++i) L += o[i] * g[i];
    return L;
  };
  std::vector<double> fd(qd.size());
  for (size_t i = 0; i < qd.size(); ++i) {
    const double h = 1e-6, keep = qd[i];
    qd[i] = keep + h;
    const double up = loss();
    qd[i] = keep - h;
    const double down = loss();
    qd[i] = keep;
    fd[i] = (up - down) / (2 * h);
  }
  for (cpu::Isa isa : tiers()) {
    Cap cap(isa);
    std::vector<float> out(s.B * s.T * s.C), att(s.B * s.NH * s.T * s.T), datt(att.size());
    attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    std::vector<float> dqkv(qkv.size(), 0.5f);
    attention_backward(dqkv.data(), datt.data(), g.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH);
    for (size_t i = 0; i < qd.size(); ++i) EXPECT_NEAR(dqkv[i], 0.5 + fd[i], 2e-6) << cpu::isa_name(isa) << " " << i;
  }
}

// Model size: the analytic float64 gradient (reference_ops.hpp).
TEST(Attention, BackwardModelSizeMatchesFloat64) {
  const Shape s{1, 128, 256, 4};
  const int64_t B = s.B, T = s.T, C = s.C, NH = s.NH, hs = s.hs();
  auto qkv = random_floats(B * T * 3 * C, 6);
  auto g = random_floats(B * T * C, 7);
  const auto qd = test::to_double(qkv);
  const std::vector<double> want = ref::fused_attention_backward(qd, ref::fused_attention(qd, B, T, C, NH).probs,
                                                                 test::to_double(g), B, T, C, NH);
  for (cpu::Isa isa : tiers()) {
    Cap cap(isa);
    std::vector<float> out(B * T * C), att(B * NH * T * T), datt(att.size()), dqkv(qkv.size(), 0.0f);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    attention_backward(dqkv.data(), datt.data(), g.data(), qkv.data(), att.data(), B, T, C, NH);
    test::expect_near_all(dqkv, want, 0, 4 * (T + hs) * kEps32 * 4, std::string("dqkv ") + cpu::isa_name(isa));
  }
}

// Lengths that leave partial row blocks (T not a multiple of 6) and head
// sizes that leave partial vectors on both tile widths (3, 20, 72).
TEST(Attention, ForwardOddShapesMatchFloat64) {
  check_forward({2, 37, 60, 3}, 13);
  check_forward({1, 19, 24, 8}, 14);
  check_forward({1, 70, 144, 2}, 15);
}

// The fused path runs on the avx2 and avx512 tiers and names its tier (the
// accuracy tests above run both against float64).
TEST(Attention, FusedPathNamesItsTier) {
  namespace ad = attention_detail;
  for (cpu::Isa isa : tiers()) {
    Cap cap(isa);
    const std::string want = isa >= cpu::Isa::avx512 ? "avx512:attention" : isa >= cpu::Isa::avx2 ? "avx2:attention" : "none";
    EXPECT_EQ(ad::fused_implementation(), want);
    EXPECT_EQ(ad::fused_available(), isa >= cpu::Isa::avx2);
  }
}

// bf16 products: q, k, v are rounded to bf16 and multiplied exactly with fp32
// accumulation, so the probabilities match a float64 reference on the
// bf16-rounded qkv to fp32 accuracy; the output additionally sees P rounded to
// bf16 (relative 2^-9 per term, sum P = 1, |v| <= 1.5: |err| <= 1.5 * 2^-9).
TEST(Attention, Bf16ProductsForwardMatchesRoundedReference) {
  const Shape s{2, 64, 128, 2};
  auto qkv = random_floats(s.B * s.T * 3 * s.C, 8, -1.5f, 1.5f);
  std::vector<double> rounded(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) rounded[i] = test::round_to_bf16(qkv[i]);
  const ref::Attention want = ref::fused_attention(rounded, s.B, s.T, s.C, s.NH);
  const std::vector<double>& att_ref = want.probs;
  const std::vector<double>& out_ref = want.out;
  const std::vector<double> att_exact = ref::fused_attention(test::to_double(qkv), s.B, s.T, s.C, s.NH).probs;
  for (const Bf16Path& path : bf16_paths()) {
    PathScope scope(path);
    std::vector<float> out(s.B * s.T * s.C), att(s.B * s.NH * s.T * s.T);
    attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, true);
    test::expect_near_all(att, att_ref, 0, 4 * (s.hs() + 8) * kEps32 * 3, "att (bf16 products) " + path.name());
    test::expect_near_all(out, out_ref, 0, 1.5 / 512 + 1e-5, "out (bf16 products) " + path.name());
    // And the rounding really happened: against the unrounded inputs the scores differ.
    double max_diff = 0;
    for (size_t i = 0; i < att.size(); ++i) max_diff = std::max(max_diff, std::abs(att[i] - att_exact[i]));
    EXPECT_GT(max_diff, 1e-4) << path.name();
  }
}

// bf16 backward against the fp32 kernel: every operand of the four products
// is rounded once (relative 2^-9), errors relative to the gradient's scale.
TEST(Attention, Bf16ProductsBackwardCloseToFp32) {
  const Shape s{2, 64, 128, 2};
  auto qkv = random_floats(s.B * s.T * 3 * s.C, 9, -1.5f, 1.5f);
  auto g = random_floats(s.B * s.T * s.C, 10);
  std::vector<float> out(s.B * s.T * s.C), att(s.B * s.NH * s.T * s.T), datt(att.size());
  std::vector<float> d32(qkv.size(), 0.0f);
  attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, false);
  attention_backward(d32.data(), datt.data(), g.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH, false);
  for (const Bf16Path& path : bf16_paths()) {
    PathScope scope(path);
    std::vector<float> d16(qkv.size(), 0.0f);
    attention_backward(d16.data(), datt.data(), g.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH, true);
    double scale = 0, max_diff = 0;
    for (size_t i = 0; i < d32.size(); ++i) {
      scale = std::max(scale, double(std::abs(d32[i])));
      max_diff = std::max(max_diff, double(std::abs(d32[i] - d16[i])));
    }
    EXPECT_LT(max_diff, 4.0 / 256 * scale) << path.name();
    EXPECT_GT(max_diff, 1e-6 * scale) << path.name();  // the bf16 path was taken
  }
}

// The bf16-amp variant keeps the probabilities as bf16 codes. Its outputs must
// be bit for bit those of the bf16-products kernels fed the same rounding:
// att16 = bf16(att) (round to nearest even, checked against the scalar
// reference rounding), out identical, and the backward identical when the
// fp32 kernel is given the widened att16 (what the tape restored before).
TEST(Attention, Bf16ProbabilityVariantIsBitExact) {
  const Shape s{2, 48, 96, 3};
  auto qkv = random_floats(s.B * s.T * 3 * s.C, 21, -1.5f, 1.5f);
  auto g = random_floats(s.B * s.T * s.C, 22);
  const size_t n_att = static_cast<size_t>(s.B * s.NH * s.T * s.T);
  std::vector<float> d32(qkv.size(), 0.5f), out32(s.B * s.T * s.C), att32(n_att), datt32(n_att);
  attention_forward(out32.data(), att32.data(), qkv.data(), s.B, s.T, s.C, s.NH, false);
  attention_backward(d32.data(), datt32.data(), g.data(), qkv.data(), att32.data(), s.B, s.T, s.C, s.NH, false);
  for (const Bf16Path& path : bf16_paths()) {
    SCOPED_TRACE(path.name());
    PathScope scope(path);
    std::vector<float> out(s.B * s.T * s.C), att(n_att), datt(n_att), out16(out.size());
    std::vector<uint16_t> att16(n_att);
    attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, true);
    attention_forward_bf16(out16.data(), att16.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    std::vector<float> widened(n_att);
    for (size_t i = 0; i < n_att; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(test::round_to_bf16(att[i])),
                static_cast<uint32_t>(att16[i]) << 16) << "att " << i;
      widened[i] = std::bit_cast<float>(static_cast<uint32_t>(att16[i]) << 16);
    }
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(out16[i])) << "out " << i;
    std::vector<float> d_ref(qkv.size(), 0.5f), d16(qkv.size(), 0.5f);  // both accumulate into 0.5
    attention_backward(d_ref.data(), datt.data(), g.data(), qkv.data(), widened.data(), s.B, s.T, s.C, s.NH, true);
    attention_backward_bf16(d16.data(), datt.data(), g.data(), qkv.data(), att16.data(), s.B, s.T, s.C, s.NH);
    for (size_t i = 0; i < d_ref.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(d_ref[i]), std::bit_cast<uint32_t>(d16[i])) << "dqkv " << i;
    // and the gradient is a real one: against the fp32 kernel within bf16 error
    double scale = 0, max_diff = 0;
    for (size_t i = 0; i < d32.size(); ++i) {
      scale = std::max(scale, double(std::abs(d32[i] - 0.5f)));
      max_diff = std::max(max_diff, double(std::abs(d32[i] - d16[i])));
    }
    EXPECT_LT(max_diff, 4.0 / 256 * scale);
  }
}

// The bf16 paths agree with each other: the same bf16 operands, exact
// products, fp32 sums in different orders; P and dS are rounded from fp32
// values that differ in their last bits, so a few bf16 units of the scale.
TEST(Attention, Bf16PathsAgree) {
  const Shape s{2, 40, 96, 3};
  auto qkv = random_floats(s.B * s.T * 3 * s.C, 31, -1.5f, 1.5f);
  auto g = random_floats(s.B * s.T * s.C, 32);
  const size_t n_att = static_cast<size_t>(s.B * s.NH * s.T * s.T);
  std::vector<float> out0, d0;
  std::string first;
  for (const Bf16Path& path : bf16_paths()) {
    PathScope scope(path);
    std::vector<float> out(s.B * s.T * s.C), datt(n_att), d(qkv.size(), 0.0f);
    std::vector<uint16_t> att16(n_att);
    attention_forward_bf16(out.data(), att16.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    attention_backward_bf16(d.data(), datt.data(), g.data(), qkv.data(), att16.data(), s.B, s.T, s.C, s.NH);
    if (first.empty()) {
      first = path.name();
      out0 = out;
      d0 = d;
      continue;
    }
    double scale = 0;
    for (float x : d0) scale = std::max(scale, double(std::abs(x)));
    test::expect_near_all(out, test::to_double(out0), 0, 2.0 / 256, "out " + path.name() + " vs " + first);
    test::expect_near_all(d, test::to_double(d0), 0, 4.0 / 256 * scale, "dqkv " + path.name() + " vs " + first);
  }
}

// Which bf16 paths take the fused tiles: f32_widened on avx2 and above.
TEST(Attention, Bf16FusedOnlyOnTheWidenedRoute) {
  for (const Bf16Path& path : bf16_paths()) {
    PathScope scope(path);
    EXPECT_EQ(attention_detail::fused_takes_bf16(),
              path.route == Bf16Route::f32_widened && path.isa >= cpu::Isa::avx2)
        << path.name();
  }
}

TEST(Attention, RejectsHeadsNotDividingWidth) {
  std::vector<float> buf(3 * 10);
  EXPECT_THROW(attention_forward(buf.data(), buf.data(), buf.data(), 1, 1, 10, 3), std::invalid_argument);
}

}  // namespace
}  // namespace mantissa::kernels
