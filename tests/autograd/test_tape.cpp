// Tape mechanics: no-grad scopes, freeing as backward runs, accumulation into
// Parameter::grad, copy-on-write of shared gradients, the bf16 matmul policy
// and the weight-cast cache.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "autograd/gradcheck.hpp"
#include "mantissa/kernels/matmul.hpp"
#include "mantissa/nn/module.hpp"

using namespace mantissa;
using gradcheck::random_vec;
using gradcheck::to_tensor;
namespace ag = mantissa::autograd;

namespace {
size_t activation_bytes() { return memory_stats().of(MemoryKind::activation); }

// Stack parameters reuse addresses across tests: drop the kernels' packing of them.
struct ForgetPacking {
  const autograd::Parameter* p;
  ~ForgetPacking() { kernels::forget_packed_operand(p); }
};

autograd::Parameter make_param(const Shape& s, uint64_t seed) {
  autograd::Parameter p{std::string("w"), Tensor(), Tensor()};
  p.value = to_tensor(s, random_vec(static_cast<size_t>(shape_numel(s)), seed));
  p.grad = Tensor::zeros(s, DType::f32, MemoryKind::gradient);
  return p;
}

// bf16 round-to-nearest-even of a float, computed on the bits.
double bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}
}  // namespace

TEST(Tape, NoGradRecordsAndRetainsNothing) {
  autograd::Parameter w = make_param({8, 8}, 1);
  ForgetPacking forget{&w};
  const size_t base = activation_bytes();
  {
    ag::NoGrad no_grad;
    EXPECT_FALSE(ag::grad_enabled());
    ag::Tape t;
    ag::Var wv = t.param(w);
    EXPECT_FALSE(wv.requires_grad());
    ag::Var x = t.leaf(Tensor::zeros({4, 8}));
    EXPECT_FALSE(x.requires_grad());
    ag::Var y = ag::gelu(t, ag::linear(t, x, wv));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(t.size(), 0u);
  }
  EXPECT_TRUE(ag::grad_enabled());
  EXPECT_EQ(activation_bytes(), base);
}

TEST(Tape, BackwardFreesSavedTensorsAsItGoes) {
  const size_t base = activation_bytes();
  const int64_t n = 1 << 14;
  ag::Tape t;
  ag::Var x = t.leaf(to_tensor({n}, random_vec(n, 2)));
  ag::Var y = x;
  for (int i = 0; i < 6; ++i) y = ag::gelu(t, y);  // each gelu saves its fp32 input
  EXPECT_EQ(t.size(), 6u);
  const size_t bytes = n * sizeof(float);
  // x, 5 saved intermediates and y itself are alive.
  EXPECT_EQ(activation_bytes() - base, 7 * bytes);
  t.backward(y, 1.0f);
  EXPECT_EQ(t.size(), 0u);
  // Left: x, y, the seed gradient held by y's node and x's gradient.
  EXPECT_EQ(activation_bytes() - base, 4 * bytes);
}

TEST(Tape, ParameterGradientsAccumulateAcrossPasses) {
  autograd::Parameter w = make_param({3, 2}, 3);
  ForgetPacking forget{&w};
  const gradcheck::Vec xv = random_vec(12, 4);
  std::vector<float> once;
  for (int pass = 0; pass < 2; ++pass) {
    ag::Tape t;
    ag::Var y = ag::linear(t, t.constant(to_tensor({4, 3}, xv)), t.param(w));
    t.backward(y, 1.0f);
    if (pass == 0) once = w.grad.to_vector();
  }
  auto twice = w.grad.to_vector();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(twice[i], 2 * once[i]);
  // dW [3, 2] = x^T [3, 4] @ ones [4, 2]: column sums of x, in float64.
  for (int k = 0; k < 3; ++k) {
    double s = 0;
    for (int r = 0; r < 4; ++r) s += static_cast<float>(xv[r * 3 + k]);
    EXPECT_NEAR(once[k * 2], s, 1e-6);
    EXPECT_NEAR(once[k * 2 + 1], s, 1e-6);
  }
  ag::Tape t;
  EXPECT_THROW(t.backward(t.constant(Tensor::zeros({1})), 1.0f), std::logic_error);
}

TEST(Tape, SharedGradientsAreCopiedBeforeWriting) {
  // z = 2a + (a + b): add hands the same gradient tensor to a and b; the later
  // contribution to a must not leak into b.
  const gradcheck::Vec R = random_vec(6, 5);
  ag::Tape t;
  ag::Var a = t.leaf(to_tensor({6}, random_vec(6, 6))), b = t.leaf(to_tensor({6}, random_vec(6, 7)));
  ag::Var s = ag::scale(t, a, 2.0f);
  ag::Var p = ag::add(t, a, b);
  ag::Var z = ag::add(t, s, p);
  t.backward(z, to_tensor({6}, R));
  auto ga = a.node->grad.to_vector(), gb = b.node->grad.to_vector();
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(gb[i], static_cast<float>(R[i]));
    EXPECT_FLOAT_EQ(ga[i], 3.0f * static_cast<float>(R[i]));
  }
}

TEST(Tape, Bf16MatmulPolicyRoundsOperandsAndAccumulatesInFp32) {
  const int64_t M = 5, K = 64, N = 3;
  autograd::Parameter w = make_param({K, N}, 8);
  ForgetPacking forget{&w};
  const gradcheck::Vec xv = random_vec(M * K, 9);
  ag::CastCache cache;
  ag::OpContext ctx;
  ctx.policy.matmul = DType::bf16;
  ctx.casts = &cache;
  ag::Tape t(ctx);
  ag::Var y = ag::linear(t, t.constant(to_tensor({M, K}, xv)), t.param(w));
  auto got = y.value.to_vector();
  const float* wv = w.value.f32();
  double max_exact_err = 0, max_fp32_diff = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double rounded = 0, full = 0;
      for (int64_t k = 0; k < K; ++k) {
        rounded += bf16_round(static_cast<float>(xv[i * K + k])) * bf16_round(wv[k * N + j]);
        full += static_cast<float>(xv[i * K + k]) * static_cast<double>(wv[k * N + j]);
      }
      max_exact_err = std::max(max_exact_err, std::abs(got[i * N + j] - rounded));
      max_fp32_diff = std::max(max_fp32_diff, std::abs(got[i * N + j] - full));
    }
  EXPECT_LT(max_exact_err, 1e-5);  // fp32 accumulation of exact bf16 products
  EXPECT_GT(max_fp32_diff, 1e-4);  // and really not the fp32 product
  EXPECT_EQ(cache.bytes(), static_cast<size_t>(K * N * 2));
}

TEST(Tape, WeightCastIsCachedPerVersion) {
  autograd::Parameter w = make_param({4, 4}, 10);
  ForgetPacking forget{&w};
  ag::CastCache cache;
  const Tensor& first = cache.get(w, DType::bf16);
  EXPECT_EQ(first.dtype(), DType::bf16);
  EXPECT_EQ(first.to_vector()[0], static_cast<float>(bf16_round(w.value.f32()[0])));
  w.value.f32()[0] = 3.0f;
  EXPECT_NE(cache.get(w, DType::bf16).to_vector()[0], 3.0f);  // same version: cached copy
  ++w.version;
  EXPECT_EQ(cache.get(w, DType::bf16).to_vector()[0], 3.0f);  // new version: recast
}

TEST(Tape, SavedActivationPolicyStoresSixteenBits) {
  const int64_t n = 1 << 12;
  for (DType saved : {DType::bf16, DType::f16}) {
    ag::OpContext ctx;
    ctx.policy.saved = saved;
    ag::Tape t(ctx);
    ag::Var x = t.leaf(to_tensor({n}, random_vec(n, 11, -3, 3)));
    const size_t base = activation_bytes();
    ag::Var y = ag::gelu(t, x);
    // y (fp32) plus the 16-bit copy of x.
    EXPECT_EQ(activation_bytes() - base, n * 4 + n * 2) << dtype_name(saved);
    t.backward(y, 1.0f);
    // The gradient used the rounded input: close to, but not exactly, the fp32 one.
    ag::Tape t32;
    ag::Var x32 = t32.leaf(x.value);
    ag::Var y32 = ag::gelu(t32, x32);
    t32.backward(y32, 1.0f);
    auto g = x.node->grad.to_vector(), g32 = x32.node->grad.to_vector();
    double max_diff = 0;
    for (size_t i = 0; i < g.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::abs(g[i] - g32[i])));
    EXPECT_GT(max_diff, 0.0);
    EXPECT_LT(max_diff, saved == DType::bf16 ? 0.05 : 0.005);
  }
}

TEST(Tape, ScaleSplitHasIndependentForwardAndBackwardScales) {
  const gradcheck::Vec xv = random_vec(8, 12), R = random_vec(8, 13);
  ag::Tape t;
  ag::Var x = t.leaf(to_tensor({8}, xv));
  ag::Var y = ag::scale_split(t, x, 0.5f, 4.0f);
  t.backward(y, to_tensor({8}, R));
  auto yv = y.value.to_vector(), g = x.node->grad.to_vector();
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(yv[i], 0.5f * static_cast<float>(xv[i]));
    EXPECT_EQ(g[i], 4.0f * static_cast<float>(R[i]));
  }
}

TEST(Tape, CheckpointRecomputesAndMatchesDirectGradients) {
  autograd::Parameter w = make_param({6, 6}, 14);
  ForgetPacking forget{&w};
  const gradcheck::Vec xv = random_vec(24, 15), R = random_vec(24, 16);
  auto segment = [&w](ag::Tape& t, const ag::Var& x) { return ag::gelu(t, ag::linear(t, x, t.param(w))); };
  std::vector<float> gx[2], gw[2];
  for (int use_checkpoint = 0; use_checkpoint < 2; ++use_checkpoint) {
    w.grad.zero_();
    ag::Tape t;
    ag::Var x = t.leaf(to_tensor({4, 6}, xv));
    ag::Var y = use_checkpoint ? ag::checkpoint(t, x, segment) : segment(t, x);
    EXPECT_EQ(t.size(), use_checkpoint ? 1u : 2u);
    t.backward(y, to_tensor({4, 6}, R));
    gx[use_checkpoint] = x.node->grad.to_vector();
    gw[use_checkpoint] = w.grad.to_vector();
  }
  EXPECT_EQ(gx[1], gx[0]);
  EXPECT_EQ(gw[1], gw[0]);
}

// fp16 products: operands rounded to fp16 (reference: the compiler's _Float16
// conversion, independent of the formats module), fp32 accumulation; and the
// output gradient is rounded to fp16 too, so tiny gradients underflow to zero
// (what loss scaling exists to prevent).
TEST(Tape, Fp16MatmulPolicyRoundsOperandsAndGradients) {
  const int64_t M = 4, K = 32, N = 3;
  autograd::Parameter w = make_param({K, N}, 18);
  ForgetPacking forget{&w};
  const gradcheck::Vec xv = random_vec(M * K, 19);
  auto half = [](double v) { return static_cast<double>(static_cast<_Float16>(static_cast<float>(v))); };
  for (float seed : {1.0f, 1e-8f}) {
    w.grad.zero_();
    ag::CastCache cache;
    ag::OpContext ctx;
    ctx.policy.matmul = DType::f16;
    ctx.casts = &cache;
    ag::Tape t(ctx);
    ag::Var y = ag::linear(t, t.constant(to_tensor({M, K}, xv)), t.param(w));
    auto got = y.value.to_vector();
    const float* wv = w.value.f32();
    double max_err = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double exact = 0;
        for (int64_t k = 0; k < K; ++k) exact += half(xv[i * K + k]) * half(wv[k * N + j]);
        max_err = std::max(max_err, std::abs(got[i * N + j] - exact));
      }
    EXPECT_LT(max_err, 1e-5);
    t.backward(y, seed);
    // dw[k][j] = sum_i x[i][k] * seed (seed rounded to fp16: 1e-8 -> 0).
    double max_grad = 0;
    for (int64_t i = 0; i < K * N; ++i) max_grad = std::max(max_grad, std::abs(double(w.grad.f32()[i])));
    if (seed == 1.0f) EXPECT_GT(max_grad, 0.1);
    else EXPECT_EQ(max_grad, 0.0) << "a 1e-8 gradient must underflow in fp16";
  }
}
