// The FP8 matrix-product path (ops_matmul.cpp with quant::Fp8Quantiser):
// forward and backward against FP64 products of the same dequantised
// operands (exact up to fp32 accumulation order), real 1-byte saved
// activations, and the weight-cast cache.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "autograd/fp64_product.hpp"
#include "mantissa/autograd/ops.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/kernels/matmul.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/quant/fp8.hpp"
#include "mantissa/tensor/memory.hpp"
#include "random_tensor.hpp"

using namespace mantissa;
using namespace mantissa::autograd;
using namespace mantissa::quant;
using mantissa::quant::Fp8Config;
using mantissa::quant::Fp8Quantiser;
using mantissa::quant::CastScaling;

namespace {

// The operand as the quantiser's rules cast it, computed independently of
// the quantiser (scaling functions called directly): dequantised values.
std::vector<float> dequantised(const Tensor& x, const formats::Format& f, CastScaling rule, int64_t rows,
                               int64_t cols, int axis, bool weight) {
  if (rule == CastScaling::current) {
    const auto a = quant::amax_of(x.f32(), x.numel());
    return quant::dequantised_values(
        quant::cast_per_tensor(f, x, quant::per_tensor_exponent(f.max(), a.value), true));
  }
  const int64_t along = rule == CastScaling::mx ? 32 : 128;
  int64_t tr = axis == 1 ? along : 1, tc = axis == 2 ? along : 1;
  if (rule == CastScaling::blockwise && weight) tr = tc = 128;
  return quant::dequantised_values(quant::cast_blocks(f, x, 1, rows, cols, tr, tc, rule));
}

struct LinearCase {
  CastScaling rule;
  int64_t M, K, N;
};

}  // namespace

std::string rule_name(const ::testing::TestParamInfo<LinearCase>& p) {
  static const char* const kNames[] = {"unit", "current", "delayed", "mx", "blockwise"};
  return kNames[static_cast<int>(p.param.rule)];
}

class Fp8Linear : public ::testing::TestWithParam<LinearCase> {};

TEST_P(Fp8Linear, ForwardAndBackwardMatchFp64OfTheSameQuantisedOperands) {
  const LinearCase c = GetParam();
  Fp8Config cfg;
  cfg.scaling = c.rule;
  cfg.forward_format = mantissa::formats::parse_format("e4m3fn");
  cfg.backward_format = mantissa::formats::parse_format("e5m2");
  auto q = std::make_shared<Fp8Quantiser>(cfg);
  const formats::Format e4 = formats::parse_format("e4m3fn"), e5 = formats::parse_format("e5m2");

  autograd::Parameter w;
  w.name = "w";
  w.value = random_tensor({c.K, c.N}, 11, 0.05f, MemoryKind::parameter);
  w.grad = Tensor::zeros({c.K, c.N}, DType::f32, MemoryKind::gradient);
  const Tensor x = random_tensor({c.M, c.K}, 12, 3.0f);
  const Tensor g = random_tensor({c.M, c.N}, 13, 1e-3f);  // small gradients: scaling matters

  OpContext ctx;
  ctx.policy.matmul = DType::bf16;
  ctx.policy.quantiser = q;
  Tape t(ctx);
  Var xv = t.leaf(x);
  Var wv = t.param(w);
  Var y = linear(t, xv, wv);
  t.backward(y, g);

  const auto xd = dequantised(x, e4, c.rule, c.M, c.K, 2, false);
  const auto wd = dequantised(w.value, e4, c.rule, c.K, c.N, 1, true);
  const auto gd = dequantised(g, e5, c.rule, c.M, c.N, 2, false);
  std::vector<double> ref, mag;
  ref_product(xd, wd, c.M, c.N, c.K, false, false, ref, mag);
  expect_close(y.value.f32(), ref, mag, c.K, "y");
  ref_product(gd, wd, c.M, c.K, c.N, false, true, ref, mag);  // dx = g w^T
  expect_close(xv.node->grad.f32(), ref, mag, c.N, "dx");
  ref_product(xd, gd, c.K, c.N, c.M, true, false, ref, mag);  // dw = x^T g
  expect_close(w.grad.f32(), ref, mag, c.M, "dw");
  // The quantised path is not the fp32 one: the FP8 rounding is visible.
  double diff = 0;
  for (int64_t i = 0; i < c.M * c.N; ++i) {
    double exact = 0;
    for (int64_t k = 0; k < c.K; ++k) exact += double(x.f32()[i / c.N * c.K + k]) * w.value.f32()[k * c.N + i % c.N];
    diff = std::max(diff, std::fabs(exact - y.value.f32()[i]));
  }
  EXPECT_GT(diff, 0.0);
  // OCP's floor rule may clip a block's largest values (MX); the others never clip here.
  if (c.rule != CastScaling::mx) {
    EXPECT_EQ(q->stats().saturated_casts, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, Fp8Linear,
                         ::testing::Values(LinearCase{CastScaling::current, 48, 96, 40},
                                           LinearCase{CastScaling::mx, 33, 70, 50},
                                           LinearCase{CastScaling::blockwise, 40, 260, 130}),
                         rule_name);

TEST(Fp8Matmul, TransposedProductOfTwoActivations) {
  // c = a @ b^T (as attention scores or a tied head), no parameters: sites by call order.
  Fp8Config cfg;
  cfg.scaling = CastScaling::current;
  cfg.forward_format = mantissa::formats::parse_format("e4m3fn");
  cfg.backward_format = mantissa::formats::parse_format("e5m2");
  auto q = std::make_shared<Fp8Quantiser>(cfg);
  const formats::Format e4 = formats::parse_format("e4m3fn"), e5 = formats::parse_format("e5m2");
  const int64_t M = 20, K = 36, N = 24;
  const Tensor a = random_tensor({M, K}, 21, 1.0f), b = random_tensor({N, K}, 22, 0.1f), g = random_tensor({M, N}, 23, 0.01f);
  OpContext ctx;
  ctx.policy.matmul = DType::bf16;
  ctx.policy.quantiser = q;
  Tape t(ctx);
  Var av = t.leaf(a), bv = t.leaf(b);
  Var c = matmul(t, av, bv, false, true);
  EXPECT_EQ(t.ctx().quant_calls, 1u);
  t.backward(c, g);
  const auto ad = dequantised(a, e4, CastScaling::current, M, K, 2, false);
  const auto bd = dequantised(b, e4, CastScaling::current, N, K, 2, false);
  const auto gd = dequantised(g, e5, CastScaling::current, M, N, 2, false);
  std::vector<double> ref, mag;
  ref_product(ad, bd, M, N, K, false, true, ref, mag);
  expect_close(c.value.f32(), ref, mag, K, "c");
  ref_product(gd, bd, M, K, N, false, false, ref, mag);  // da = g b
  expect_close(av.node->grad.f32(), ref, mag, N, "da");
  ref_product(gd, ad, N, K, M, true, false, ref, mag);  // db = g^T a
  expect_close(bv.node->grad.f32(), ref, mag, M, "db");
}

TEST(Fp8Matmul, SavedActivationsAreOneByte) {
  // Forward of linear with a weight that needs a gradient: what stays
  // allocated until backward is the output (fp32) plus the saved input:
  // 1 byte per element with FP8 casts, 2 with bf16.
  const int64_t M = 256, K = 512, N = 64;
  autograd::Parameter w;
  w.name = "w";
  w.value = random_tensor({K, N}, 31, 0.05f, MemoryKind::parameter);
  w.grad = Tensor::zeros({K, N}, DType::f32, MemoryKind::gradient);
  auto kept_bytes = [&](const PrecisionPolicy& p) {
    Tensor x = random_tensor({M, K}, 32, 1.0f);
    OpContext ctx;
    ctx.policy = p;
    Tape t(ctx);
    Var xv = t.constant(x);
    Var wv = t.param(w);
    { Var warm = linear(t, xv, wv); }  // weight casts cached, primitives made
    t.clear();
    const size_t before = memory_stats().of(MemoryKind::activation);
    Var y = linear(t, xv, wv);
    const size_t after = memory_stats().of(MemoryKind::activation);
    return static_cast<int64_t>(after - before) - M * N * 4;
  };
  PrecisionPolicy bf16;
  bf16.matmul = bf16.saved = DType::bf16;
  PrecisionPolicy fp8 = bf16;
  Fp8Config cfg;
  cfg.scaling = CastScaling::current;
  cfg.forward_format = mantissa::formats::parse_format("e4m3fn");
  cfg.backward_format = mantissa::formats::parse_format("e5m2");
  fp8.quantiser = std::make_shared<Fp8Quantiser>(cfg);
  EXPECT_EQ(kept_bytes(bf16), 2 * M * K);
  EXPECT_EQ(kept_bytes(fp8), M * K);
  kernels::forget_packed_operand(&w);
}

TEST(Fp8Matmul, WeightCastsAreCachedPerVersion) {
  Fp8Config cfg;
  cfg.scaling = CastScaling::current;
  cfg.forward_format = mantissa::formats::parse_format("e4m3fn");
  auto q = std::make_shared<Fp8Quantiser>(cfg);
  autograd::Parameter w;
  w.name = "w";
  w.value = random_tensor({32, 16}, 41, 0.05f, MemoryKind::parameter);
  OpContext ctx;
  ctx.policy.matmul = DType::bf16;
  ctx.policy.quantiser = q;
  const Tensor x = random_tensor({8, 32}, 42, 1.0f);
  NoGrad no_grad;
  Tape t(ctx);
  Var y1 = linear(t, t.constant(x), t.param(w));
  Var y2 = linear(t, t.constant(x), t.param(w));
  EXPECT_EQ(q->stats().weight_casts, 1);
  EXPECT_EQ(y1.value.to_vector(), y2.value.to_vector());
  for (int64_t i = 0; i < w.value.numel(); ++i) w.value.f32()[i] *= 4;  // an update: new version
  ++w.version;
  Var y3 = linear(t, t.constant(x), t.param(w));
  EXPECT_EQ(q->stats().weight_casts, 2);
  // Scaling the weight by 4 moves its per-tensor scale by 4: same codes, 4x the output.
  const auto v1 = y1.value.to_vector(), v3 = y3.value.to_vector();
  for (size_t i = 0; i < v1.size(); ++i) EXPECT_EQ(v3[i], 4 * v1[i]);
}
