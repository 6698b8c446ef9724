// The FP4 products end to end (ops_matmul.cpp with quant::Fp4Quantiser): a
// linear layer's forward, dgrad and wgrad against FP64 products of operands
// cast independently by the scalar reference (formats::fp4_cast_reference,
// the Wgrad inputs rotated by the RHT first), exact up to fp32 accumulation;
// and the bf16 layers / fp4_until switches.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "autograd/fp64_product.hpp"
#include "mantissa/autograd/ops.hpp"
#include "mantissa/formats/fp4.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/quant/fp4.hpp"
#include "mantissa/tensor/memory.hpp"
#include "random_tensor.hpp"

using namespace mantissa;
using namespace mantissa::autograd;
using namespace mantissa::quant;
namespace mf = mantissa::formats;
namespace ms = mantissa::quant;

namespace {

// Dequantised values of x [rows, cols] under the reference cast (rotated
// first along rows, or along columns with `along_cols`, if `signs`).
std::vector<float> ref_cast(const Tensor& x, int64_t rows, int64_t cols, int64_t tr, int64_t tc,
                            const ms::RhtSigns* signs = nullptr, bool along_cols = false) {
  std::vector<float> in(x.f32(), x.f32() + rows * cols);
  if (signs && along_cols) ms::rht_cols(in.data(), in.data(), rows, cols, *signs);
  else if (signs) ms::rht_rows(in.data(), rows, cols, *signs);
  std::vector<uint16_t> dec(in.size());
  const mf::Fp4Spec s{.tile_rows = tr, .tile_cols = tc};
  const mf::Fp4Result r = mf::fp4_cast_reference(s, in.data(), rows, cols, nullptr, nullptr, dec.data());
  std::vector<float> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = std::bit_cast<float>(uint32_t{dec[i]} << 16) * r.tensor_scale;
  return out;
}

struct LinearRun {
  Tensor y, dx, dw;
};

LinearRun run_linear(std::shared_ptr<ms::Fp4Quantiser> q, autograd::Parameter& w, const Tensor& x, const Tensor& g) {
  w.grad = Tensor::zeros(w.value.shape(), DType::f32, MemoryKind::gradient);
  OpContext ctx;
  ctx.policy.matmul = DType::bf16;
  ctx.policy.quantiser = q;
  Tape t(ctx);
  Var xv = t.leaf(x);
  Var wv = t.param(w);
  Var y = linear(t, xv, wv);
  t.backward(y, g);
  return {y.value, xv.node->grad, w.grad};
}

}  // namespace

TEST(Fp4Linear, ThreeProductsMatchFp64OfTheReferenceCasts) {
  const int64_t M = 48, K = 64, N = 40;
  autograd::Parameter w;
  w.name = "transformer.h.1.mlp.c_fc.weight";
  w.value = random_tensor({K, N}, 11, 0.05f, MemoryKind::parameter);
  const Tensor x = random_tensor({M, K}, 12, 3.0f), g = random_tensor({M, N}, 13, 1e-3f);
  for (ms::RhtMode rht : {ms::RhtMode::random, ms::RhtMode::deterministic}) {
    ms::Fp4Config c;
    c.rht = rht;
    c.sr_gradients = false;  // nearest-even everywhere: the reference can redo every cast
    c.seed = 42;
    auto q = std::make_shared<ms::Fp4Quantiser>(c);
    const LinearRun r = run_linear(q, w, x, g);
    const ms::RhtSigns s = ms::rht_signs(42, rht == ms::RhtMode::random);
    const auto xd = ref_cast(x, M, K, 1, 16), wd = ref_cast(w.value, K, N, 16, 16), gd = ref_cast(g, M, N, 1, 16);
    const auto xr = ref_cast(x, M, K, 16, 1, &s), gr = ref_cast(g, M, N, 16, 1, &s);
    std::vector<double> ref, mag;
    ref_product(xd, wd, M, N, K, false, false, ref, mag);
    expect_close(r.y.f32(), ref, mag, K, "y");
    ref_product(gd, wd, M, K, N, false, true, ref, mag);
    expect_close(r.dx.f32(), ref, mag, N, "dx");
    ref_product(xr, gr, K, N, M, true, false, ref, mag);
    expect_close(r.dw.f32(), ref, mag, M, "dw");
    // The rotation leaves x^T g unchanged up to the 4-bit rounding: dw stays near the exact product.
    double err = 0, norm = 0;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) {
        double exact = 0;
        for (int64_t m = 0; m < M; ++m) exact += double(x.f32()[m * K + k]) * g.f32()[m * N + n];
        err += (exact - r.dw.f32()[k * N + n]) * (exact - r.dw.f32()[k * N + n]);
        norm += exact * exact;
      }
    EXPECT_LT(std::sqrt(err / norm), 0.25);
    EXPECT_GT(std::sqrt(err / norm), 0.0);
    EXPECT_EQ(q->stats().bf16_casts, 0);
  }
}

TEST(Fp4Linear, StochasticGradientsReplayExactly) {
  const int64_t M = 32, K = 48, N = 32;
  autograd::Parameter w;
  w.name = "transformer.h.2.attn.c_proj.weight";
  w.value = random_tensor({K, N}, 1, 0.05f, MemoryKind::parameter);
  const Tensor x = random_tensor({M, K}, 2, 1.0f), g = random_tensor({M, N}, 3, 1e-2f);
  ms::Fp4Config c;
  c.seed = 7;
  auto q1 = std::make_shared<ms::Fp4Quantiser>(c), q2 = std::make_shared<ms::Fp4Quantiser>(c);
  q1->set_progress(5, 100);
  q2->set_progress(5, 100);
  const LinearRun a = run_linear(q1, w, x, g), b = run_linear(q2, w, x, g);
  for (int64_t i = 0; i < K * N; ++i) ASSERT_EQ(a.dw.f32()[i], b.dw.f32()[i]);
  q2->set_progress(6, 100);  // another step, other draws
  const LinearRun d = run_linear(q2, w, x, g);
  int64_t differ = 0;
  for (int64_t i = 0; i < K * N; ++i) differ += a.dw.f32()[i] != d.dw.f32()[i];
  EXPECT_GT(differ, 0);
}

TEST(Fp4Linear, Bf16LayersAndTheLateSwitch) {
  autograd::Parameter w;
  w.name = "transformer.h.3.mlp.c_proj.weight";
  w.block = 3;
  w.value = random_tensor({32, 16}, 1, 0.05f, MemoryKind::parameter);
  ms::Fp4Config c;
  c.bf16_blocks = {0, -1};  // the recipe setting bf16_layers "0,-1,head"
  c.bf16_head = true;
  c.n_blocks = 4;
  c.until = 0.9;
  ms::Fp4Quantiser q(c);
  EXPECT_FALSE(q.active(w));  // -1 of 4 blocks
  w.name = "transformer.h.2.mlp.c_proj.weight";
  w.block = 2;
  EXPECT_TRUE(q.active(w));
  q.set_progress(89, 100);
  EXPECT_TRUE(q.active(w));
  q.set_progress(90, 100);
  EXPECT_FALSE(q.active(w));
  q.set_progress(0, 100);
  w.name = "transformer.wte.weight";
  w.block = -1;
  w.role = autograd::Role::token_embedding;
  EXPECT_FALSE(q.active(w));
  c.bf16_blocks.clear();  // bf16_layers "none"
  c.bf16_head = false;
  EXPECT_TRUE(ms::Fp4Quantiser(c).active(w));
}

// rht_dgrad: dgrad's dy and W are both rotated along N before their casts
// (dy 1 x 16, W in its 16 x 16 blocks), so dx = (dy Q^T)(W Q^T)^T; the
// forward and Wgrad products stay as without it.
TEST(Fp4Linear, DgradRotationAlongTheContraction) {
  const int64_t M = 32, K = 48, N = 40;  // N = 40: a last group of 8 columns stays unrotated
  autograd::Parameter w;
  w.name = "transformer.h.1.mlp.c_fc.weight";
  w.value = random_tensor({K, N}, 21, 0.05f, MemoryKind::parameter);
  const Tensor x = random_tensor({M, K}, 22, 2.0f), g = random_tensor({M, N}, 23, 1e-3f);
  ms::Fp4Config c;
  c.sr_gradients = false;
  c.rht_dgrad = true;
  c.seed = 9;
  const LinearRun r = run_linear(std::make_shared<ms::Fp4Quantiser>(c), w, x, g);
  const ms::RhtSigns s = ms::rht_signs(9);
  const auto xd = ref_cast(x, M, K, 1, 16), wd = ref_cast(w.value, K, N, 16, 16);
  const auto gq = ref_cast(g, M, N, 1, 16, &s, true), wq = ref_cast(w.value, K, N, 16, 16, &s, true);
  std::vector<double> ref, mag;
  ref_product(xd, wd, M, N, K, false, false, ref, mag);
  expect_close(r.y.f32(), ref, mag, K, "y");
  ref_product(gq, wq, M, K, N, false, true, ref, mag);
  expect_close(r.dx.f32(), ref, mag, N, "dx");
  const auto xr = ref_cast(x, M, K, 16, 1, &s), gr = ref_cast(g, M, N, 16, 1, &s);
  ref_product(xr, gr, K, N, M, true, false, ref, mag);
  expect_close(r.dw.f32(), ref, mag, M, "dw");
}

// The saved Wgrad operand of an activation: packed codes and block scales
// (n / 2 + tiles bytes, counted as activation memory) whose decode is the
// bf16 decode kept without packing, bit for bit, scale included.
TEST(Fp4Linear, PackedSavedOperandDecodesToTheBf16One) {
  const int64_t M = 40, K = 24;
  autograd::Parameter w;
  w.name = "transformer.h.1.mlp.c_fc.weight";
  w.block = 1;
  const Tensor x = random_tensor({M, K}, 31, 1.5f);
  QuantSite site;
  site.key = &w;
  for (auto format : {mf::Fp4Scale::nvfp4, mf::Fp4Scale::mxfp4}) {
    ms::Fp4Config c;
    c.format = format;
    c.sr_operands = true;  // stochastic: the two quantisers draw the same
    ms::Fp4Quantiser packed(c);
    c.pack_saved = false;
    ms::Fp4Quantiser plain(c);
    const size_t before = memory_stats().of(MemoryKind::activation);
    const QuantisedOperand qp = packed.quantise(x, 1, M, K, 2, site, nullptr);
    const size_t held = memory_stats().of(MemoryKind::activation) - before;
    const QuantisedOperand qb = plain.quantise(x, 1, M, K, 2, site, nullptr);
    ASSERT_TRUE(qp.packed);
    ASSERT_FALSE(qb.packed);
    const int64_t b = format == mf::Fp4Scale::nvfp4 ? 16 : 32;
    const size_t want = static_cast<size_t>(M * K / 2 + (M + b - 1) / b * K);
    EXPECT_EQ(qp.bytes(), want);
    EXPECT_EQ(qb.bytes(), static_cast<size_t>(2 * M * K));
    EXPECT_GE(held, want);  // the allocator rounds blocks up
    EXPECT_LT(held, want + 256);
    const Tensor a = packed.decode(qp), d = plain.decode(qb);
    ASSERT_EQ(a.numel(), d.numel());
    EXPECT_EQ(a.scale(), d.scale());
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<uint16_t>()[i], d.data<uint16_t>()[i]) << i;
  }
}
