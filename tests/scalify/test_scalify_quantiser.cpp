// The `propagate` quantiser on a small GPT: operand scales equal the ones
// the propagation rules give from the parameters (computed here
// independently), dynamic rescales are exactly 2 per layer + 1 for the
// head, the FP8 forward/backward stays close to fp32, and training learns.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <random>

#include "mantissa/formats/round.hpp"
#include "mantissa/nn/gpt.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/scalify/scalify_quantiser.hpp"
#include "tiny_gpt.hpp"

using namespace mantissa;
using scalify::ScalifyOptions;
using scalify::ScalifyQuantiser;

namespace {

nn::GPTConfig small() {
  omp_set_num_threads(1);  // tiny shapes: threads only add synchronisation on a busy machine
  return tiny_gpt_config(2, 3);
}

nn::Batch batch(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return recurrence_batch(rng, 4);
}

// Independent: floor(log2 rms) of a parameter; -1000 for an all-zero one.
int log2_scale(nn::GPT& m, const std::string& name) {
  for (const autograd::Parameter* p : m.parameters())
    if (p->name == name) {
      double ss = 0;
      for (int64_t i = 0; i < p->value.numel(); ++i) ss += static_cast<double>(p->value.f32()[i]) * p->value.f32()[i];
      if (ss == 0) return -1000;
      return static_cast<int>(std::floor(std::log2(std::sqrt(ss / static_cast<double>(p->value.numel())))));
    }
  ADD_FAILURE() << "no parameter " << name;
  return 0;
}

// The add rule on exponents: floor(log2 sqrt(2^2a + 2^2b)); -1000 = zero.
int join(int a, int b) {
  if (a == -1000) return b;
  if (b == -1000) return a;
  return static_cast<int>(std::floor(0.5 * std::log2(std::ldexp(1.0, 2 * a) + std::ldexp(1.0, 2 * b))));
}

TEST(ScalifyQuantiser, ScalesComeFromPropagationAndTwoRescalesPerLayer) {
  nn::GPT m(small());
  // Biases away from zero so the add rule matters.
  for (autograd::Parameter* p : m.parameters())
    if (p->name.ends_with(".bias"))
      for (int64_t i = 0; i < p->value.numel(); ++i) p->value.f32()[i] = 0.3f * std::sin(static_cast<float>(i));
  auto q = std::make_shared<ScalifyQuantiser>(ScalifyOptions{}, m.parameters());
  autograd::PrecisionPolicy pol;
  pol.quantiser = q;
  m.set_precision(pol);
  m.zero_grad();
  m.forward_backward(batch(1), 1.0f / 64);
  q->end_step();
  const auto e = q->last_exponents();
  const int C = 32, rC = static_cast<int>(std::floor(std::log2(std::sqrt(32.0))));  // 2
  (void)C;
  for (int l = 0; l < 2; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    const int ln1 = join(log2_scale(m, h + "ln_1.weight"), log2_scale(m, h + "ln_1.bias"));
    const int ln2 = join(log2_scale(m, h + "ln_2.weight"), log2_scale(m, h + "ln_2.bias"));
    EXPECT_EQ(e.at("activation:" + h + "attn.c_attn.weight"), ln1);
    EXPECT_EQ(e.at("activation:" + h + "mlp.c_fc.weight"), ln2);
    EXPECT_EQ(e.at("activation:" + h + "attn.c_proj.weight"),
              join(ln1 + log2_scale(m, h + "attn.c_attn.weight") + rC, log2_scale(m, h + "attn.c_attn.bias")));
    EXPECT_EQ(e.at("activation:" + h + "mlp.c_proj.weight"),
              join(ln2 + log2_scale(m, h + "mlp.c_fc.weight") + rC, log2_scale(m, h + "mlp.c_fc.bias")));
    EXPECT_EQ(e.at("weight:" + h + "mlp.c_fc.weight"), log2_scale(m, h + "mlp.c_fc.weight"));
    EXPECT_EQ(e.at("grad_output:" + h + "mlp.c_fc.weight"),
              e.at("grad_output:" + h + "mlp.c_proj.weight") + log2_scale(m, h + "mlp.c_proj.weight") + rC);
    EXPECT_EQ(e.at("grad_output:" + h + "attn.c_attn.weight"),
              e.at("grad_output:" + h + "attn.c_proj.weight") + log2_scale(m, h + "attn.c_proj.weight") + rC +
                  std::max(0, 2 * e.at("activation:" + h + "attn.c_proj.weight")));
  }
  EXPECT_EQ(e.at("activation:transformer.wte.weight"),
            join(log2_scale(m, "transformer.ln_f.weight"), log2_scale(m, "transformer.ln_f.bias")));
  const auto st = q->stats();
  EXPECT_EQ(st.layers, 2);
  EXPECT_EQ(st.last_step_rescales, 2 * 2 + 1);  // residual grads after both LN backwards per layer + the head
  std::printf("[scalify] casts %ld dynamic rescales %ld (%.1f per layer incl. head) saturated %ld\n",
              static_cast<long>(st.casts), static_cast<long>(st.last_step_rescales), st.rescales_per_layer(),
              static_cast<long>(st.saturated_values));
}

TEST(ScalifyQuantiser, Fp8StepIsCloseToFp32AndTrains) {
  nn::GPT ref(small()), fp8(small());
  auto q = std::make_shared<ScalifyQuantiser>(ScalifyOptions{}, fp8.parameters());
  autograd::PrecisionPolicy pol;
  pol.quantiser = q;
  fp8.set_precision(pol);
  ref.zero_grad();
  fp8.zero_grad();
  const nn::LossSum lr = ref.forward_backward(batch(2), 1.0f / 64), lq = fp8.forward_backward(batch(2), 1.0f / 64);
  q->end_step();
  EXPECT_NEAR(lq.sum, lr.sum, 0.03 * lr.sum);
  double num = 0, den = 0;
  const auto pr = ref.parameters(), pq = fp8.parameters();
  for (size_t j = 0; j < pr.size(); ++j)
    for (int64_t i = 0; i < pr[j]->grad.numel(); ++i) {
      const double d = static_cast<double>(pq[j]->grad.f32()[i]) - pr[j]->grad.f32()[i];
      num += d * d;
      den += static_cast<double>(pr[j]->grad.f32()[i]) * pr[j]->grad.f32()[i];
    }
  const double rel = std::sqrt(num / den);
  EXPECT_LT(rel, 0.25);  // FP8 E4M3/E5M2 operands: a few % per product
  EXPECT_GT(rel, 1e-4);  // and the casts really happened
  std::printf("[scalify] loss fp32 %.5f scalify-fp8 %.5f, gradient relative L2 error %.4f\n", lr.sum / lr.count,
              lq.sum / lq.count, rel);
  optim::OptimizerConfig c;
  auto opt = optim::make_optimizer(c, fp8.parameters());
  double first = 0, last = 0;
  for (int s = 0; s < 25; ++s) {
    fp8.zero_grad();
    const nn::LossSum l = fp8.forward_backward(batch(10 + static_cast<uint64_t>(s)), 1.0f / 64);
    opt->step(1e-2);
    q->end_step();
    (s == 0 ? first : last) = l.sum / l.count;
  }
  std::printf("[scalify] 25 steps: loss %.4f -> %.4f, saturated values %ld, dynamic rescales %ld, recast %ld\n",
              first, last, static_cast<long>(q->stats().saturated_values),
              static_cast<long>(q->stats().dynamic_rescales), static_cast<long>(q->stats().recasts));
  EXPECT_LT(last, 0.5 * first);
  EXPECT_EQ(q->stats().last_step_rescales, 5);
}

// A dynamic rescale (an operand without a propagated scale) is cast at
// E = floor(log2 amax) whether the site's last exponent, which the cast
// tries first, was right or not; checked against the scalar reference
// encoder. Tensors holding NaN get E = 0 and keep their NaN.
TEST(ScalifyQuantiser, DynamicRescaleMatchesTheReferenceWhateverItsLastExponent) {
  nn::GPT m(small());
  ScalifyQuantiser q(ScalifyOptions{}, m.parameters());
  const formats::Format& e4m3 = formats::preset("e4m3fn");
  autograd::QuantSite site;  // no key: a product of two activations, rescaled dynamically
  site.ordinal = 7;
  auto check = [&](float gain, bool nan, int expected_exponent) {
    Tensor x = Tensor::empty({37, 29});
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = gain * std::sin(0.7f * static_cast<float>(i));
    if (nan) x.f32()[5] = std::nanf("");
    Tensor decoded;
    const autograd::QuantisedOperand c = q.quantise(x, 1, 37, 29, 2, site, &decoded);
    ASSERT_EQ(c.codes.scale(), std::ldexp(1.0f, expected_exponent)) << "gain " << gain;
    formats::RoundOptions sat;
    sat.saturate = !nan;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const uint32_t want = formats::encode(e4m3, std::ldexp(x.f32()[i], -expected_exponent), sat);
      ASSERT_EQ(c.codes.data<uint8_t>()[i], want) << "gain " << gain << " element " << i;
      const float back = std::bit_cast<float>(static_cast<uint32_t>(decoded.data<uint16_t>()[i]) << 16);
      const float ref = formats::decode_f32(e4m3, want);
      if (std::isnan(ref)) ASSERT_TRUE(std::isnan(back));
      else ASSERT_EQ(back, ref) << "gain " << gain << " element " << i;
    }
  };
  // amax of sin(0.7 i) over 1073 values is just below 1: floor(log2) = -1.
  check(1.0f, false, -1);   // no last exponent: amax pass, then the cast
  check(1.0f, false, -1);   // last exponent right: one pass
  check(16.0f, false, 3);   // last exponent wrong: cast again
  check(16.0f, false, 3);
  check(16.0f, true, 0);    // NaN: any scale, no saturation
  check(0.25f, false, -3);
  EXPECT_EQ(q.stats().recasts, 3);
  EXPECT_EQ(q.stats().dynamic_rescales, 6);
}

TEST(ScalifyQuantiser, RefusesFormatsItCannotCast) {
  nn::GPT m(small());
  ScalifyOptions o;
  o.forward_format = mantissa::formats::parse_format("e3m2fn");  // no tensor dtype (fp16 and the 1-byte FP8 formats have one)
  EXPECT_THROW(ScalifyQuantiser(o, m.parameters()), std::invalid_argument);
}

}  // namespace
