// GPT: GPT-2 layout and init, whole-model gradients against float64 finite
// differences, grad_scale, no-grad retention, bf16 policy accuracy and memory.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "mantissa/amp/amp.hpp"
#include "mantissa/recipe/recipe.hpp"
#include "mantissa/autograd/tape.hpp"
#include "mantissa/nn/gpt.hpp"
#include "nn/reference_gpt.hpp"

using namespace mantissa;
using nn::GPT;
using nn::GPTConfig;

namespace {

GPTConfig tiny_config() {
  GPTConfig c;
  c.vocab = 64;
  c.context = 10;
  c.layers = 2;
  c.d_model = 16;
  c.heads = 2;
  c.seed = 7;
  return c;
}

// ids and targets [B, T]; every 5th target ignored (-1).
nn::Batch make_batch(int64_t B, int64_t T, int64_t V, uint64_t seed, std::vector<int32_t>* ids_out = nullptr,
                     std::vector<int32_t>* targets_out = nullptr) {
  std::mt19937_64 g(seed);
  nn::Batch b{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
  for (int64_t i = 0; i < B * T; ++i) {
    b.inputs.data<int32_t>()[i] = static_cast<int32_t>(g() % V);
    b.targets.data<int32_t>()[i] = i % 5 == 3 ? -1 : static_cast<int32_t>(g() % V);
  }
  if (ids_out) ids_out->assign(b.inputs.data<int32_t>(), b.inputs.data<int32_t>() + B * T);
  if (targets_out) targets_out->assign(b.targets.data<int32_t>(), b.targets.data<int32_t>() + B * T);
  return b;
}

// Parameters away from GPT-2's init so that every path (attention patterns,
// residual branches, LN gains) carries gradient of comparable size.
reference::Params randomise(GPT& model, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  reference::Params p;
  for (autograd::Parameter* q : model.parameters()) {
    const bool ln_gain = q->name.find("ln_") != std::string::npos && q->name.ends_with(".weight");
    const double sd = q->value.ndim() == 2 ? 0.3 : 0.1;
    reference::Vec v(static_cast<size_t>(q->value.numel()));
    for (auto& x : v) x = static_cast<float>((ln_gain ? 1.0 : 0.0) + sd * n(g));  // exactly representable
    for (size_t i = 0; i < v.size(); ++i) q->value.f32()[i] = static_cast<float>(v[i]);
    ++q->version;
    p[q->name] = v;
  }
  return p;
}

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace

TEST(GPT, ParameterNamesShapesAndDecayFollowGPT2) {
  GPT m(tiny_config());
  std::vector<std::string> names;
  for (auto* p : m.parameters()) names.push_back(p->name);
  ASSERT_EQ(names.size(), 2u + 12u * 2u + 2u);
  EXPECT_EQ(names[0], "transformer.wte.weight");
  EXPECT_EQ(names[1], "transformer.wpe.weight");
  EXPECT_EQ(names[2], "transformer.h.0.ln_1.weight");
  EXPECT_EQ(names[4], "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(names[13], "transformer.h.0.mlp.c_proj.bias");
  EXPECT_EQ(names.back(), "transformer.ln_f.bias");
  const int64_t C = 16, V = 64, T = 10;
  EXPECT_EQ(m.find("transformer.wte.weight")->value.shape(), (Shape{V, C}));
  EXPECT_EQ(m.find("transformer.wpe.weight")->value.shape(), (Shape{T, C}));
  EXPECT_EQ(m.find("transformer.h.1.attn.c_attn.weight")->value.shape(), (Shape{C, 3 * C}));
  EXPECT_EQ(m.find("transformer.h.1.attn.c_proj.weight")->value.shape(), (Shape{C, C}));
  EXPECT_EQ(m.find("transformer.h.1.mlp.c_fc.weight")->value.shape(), (Shape{C, 4 * C}));
  EXPECT_EQ(m.find("transformer.h.1.mlp.c_proj.weight")->value.shape(), (Shape{4 * C, C}));
  EXPECT_EQ(m.find("nope"), nullptr);
  for (auto* p : m.parameters()) {
    const bool matrix = p->value.ndim() == 2 && p->name != "transformer.wpe.weight";
    EXPECT_EQ(p->decay, matrix) << p->name;
    EXPECT_EQ(p->grad.shape(), p->value.shape()) << p->name;
  }
  // GPT-2 count: V C + T C + L (12 C^2 + 13 C) + 2 C.
  EXPECT_EQ(m.parameter_count(), V * C + T * C + 2 * (12 * C * C + 13 * C) + 2 * C);
  EXPECT_EQ(m.kind(), "gpt");
  GPTConfig back = GPTConfig::from_json(m.config_json());
  EXPECT_EQ(back.vocab, V);
  EXPECT_EQ(back.context, T);
  EXPECT_EQ(back.layers, 2);
  EXPECT_EQ(back.d_model, C);
  EXPECT_EQ(back.heads, 2);
  EXPECT_EQ(back.seed, 7u);
}

TEST(GPT, InitialisationIsGPT2AndSeeded) {
  GPTConfig c = tiny_config();
  c.d_model = 64;
  c.layers = 2;
  GPT m(c);
  auto stddev = [](const Tensor& t) {
    double s = 0, s2 = 0;
    auto v = t.to_vector();
    for (float x : v) s += x, s2 += static_cast<double>(x) * x;
    const double mean = s / v.size();
    return std::sqrt(s2 / v.size() - mean * mean);
  };
  // 12288 samples: the sample sd is within 3% of sigma with overwhelming probability.
  EXPECT_NEAR(stddev(m.find("transformer.h.0.attn.c_attn.weight")->value), 0.02, 0.02 * 0.03);
  EXPECT_NEAR(stddev(m.find("transformer.h.1.mlp.c_fc.weight")->value), 0.02, 0.02 * 0.03);
  EXPECT_NEAR(stddev(m.find("transformer.h.1.mlp.c_proj.weight")->value), 0.01, 0.01 * 0.03);  // 0.02/sqrt(2*2)
  for (float x : m.find("transformer.h.0.ln_1.weight")->value.to_vector()) ASSERT_EQ(x, 1.0f);
  for (float x : m.find("transformer.h.0.attn.c_attn.bias")->value.to_vector()) ASSERT_EQ(x, 0.0f);
  GPT same(c);
  EXPECT_EQ(same.find("transformer.wte.weight")->value.to_vector(), m.find("transformer.wte.weight")->value.to_vector());
  c.seed += 1;
  GPT other(c);
  EXPECT_NE(other.find("transformer.wte.weight")->value.to_vector(), m.find("transformer.wte.weight")->value.to_vector());
}

namespace {
// Loss and every parameter's gradient against float64 central differences of reference::gpt_loss.
void check_gradients(bool post) {
  GPTConfig c = tiny_config();
  c.pre_norm = !post;
  GPT m(c);
  reference::Params p = randomise(m, 11);
  const int64_t B = 2, T = 8;
  std::vector<int32_t> ids, targets;
  nn::Batch batch = make_batch(B, T, c.vocab, 3, &ids, &targets);
  const reference::GPTShape shape{c.vocab, c.d_model, c.layers, c.heads, post};

  m.zero_grad();
  nn::LossSum loss = m.forward_backward(batch, 1.0f);
  const double ref_loss = reference::gpt_loss(p, shape, ids, targets, B, T);
  EXPECT_EQ(loss.count, 13);  // 16 targets, positions 3, 8, 13 ignored
  EXPECT_NEAR(loss.sum, ref_loss, 1e-5 * std::abs(ref_loss));

  std::mt19937_64 g(5);
  const double h = 1e-5;
  for (autograd::Parameter* q : m.parameters()) {
    SCOPED_TRACE(q->name);
    const std::vector<float> grad = q->grad.to_vector();
    double gmax = 0;
    for (float x : grad) gmax = std::max(gmax, static_cast<double>(std::abs(x)));
    // Entries checked: 8 random ones, plus for wpe a row past T (must stay 0).
    for (int k = 0; k < 8; ++k) {
      const size_t i = g() % grad.size();
      reference::Params plus = p, minus = p;
      plus[q->name][i] += h;
      minus[q->name][i] -= h;
      const double fd = (reference::gpt_loss(plus, shape, ids, targets, B, T) -
                         reference::gpt_loss(minus, shape, ids, targets, B, T)) / (2 * h);
      ASSERT_NEAR(grad[i], fd, 1e-3 * std::max(gmax, 1e-3)) << "element " << i;
    }
    if (q->name == "transformer.wpe.weight") {
      for (int64_t i = T * c.d_model; i < q->grad.numel(); ++i) ASSERT_EQ(grad[static_cast<size_t>(i)], 0.0f);
    }
  }
}
}  // namespace

TEST(GPT, GradientsMatchFloat64FiniteDifferences) { check_gradients(false); }

TEST(GPT, PostNormGradientsMatchFloat64FiniteDifferences) { check_gradients(true); }

// Post-norm (GPT-1's blocks): the same parameters less ln_f; the layout survives config.json.
TEST(GPT, PostNormHasNoFinalNormAndRoundTrips) {
  GPTConfig c = tiny_config();
  c.pre_norm = false;
  GPT m(c);
  const int64_t C = 16, V = 64, T = 10;
  EXPECT_EQ(m.find("transformer.ln_f.weight"), nullptr);
  EXPECT_NE(m.find("transformer.h.1.ln_2.bias"), nullptr);
  EXPECT_EQ(m.parameter_count(), V * C + T * C + 2 * (12 * C * C + 13 * C));
  EXPECT_FALSE(GPTConfig::from_json(m.config_json()).pre_norm);
  EXPECT_TRUE(GPTConfig::from_json(GPT(tiny_config()).config_json()).pre_norm);
  std::string bad = m.config_json();
  bad.replace(bad.find("\"post\""), 6, "\"mid\"");
  try {
    GPTConfig::from_json(bad);
    ADD_FAILURE() << "norm 'mid' accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("norm must be pre or post, got 'mid'"), std::string::npos) << e.what();
  }
  c.unit.enabled = c.unit.umup = true;
  EXPECT_THROW(c.validate(), std::invalid_argument);  // u-muP's depth rule is the pre-norm one
}

TEST(GPT, GradScaleMultipliesAndCallsAccumulate) {
  GPT m(tiny_config());
  randomise(m, 12);
  nn::Batch batch = make_batch(2, 8, 64, 4);
  m.zero_grad();
  nn::LossSum l1 = m.forward_backward(batch, 1.0f);
  std::vector<std::vector<float>> g1;
  for (auto* p : m.parameters()) g1.push_back(p->grad.to_vector());
  // Equal up to fp32 rounding of the sums, measured against the tensor's largest entry.
  auto expect_multiple = [&](float factor) {
    size_t k = 0;
    for (auto* p : m.parameters()) {
      auto g = p->grad.to_vector();
      double gmax = 0;
      for (float x : g1[k]) gmax = std::max(gmax, std::abs(static_cast<double>(factor) * x));
      for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], factor * g1[k][i], 1e-5 * gmax) << p->name << " " << i;
      ++k;
    }
  };
  m.zero_grad();
  nn::LossSum l3 = m.forward_backward(batch, 3.0f);
  EXPECT_EQ(l1.sum, l3.sum);  // the loss itself is not scaled
  expect_multiple(3.0f);
  m.forward_backward(batch, 0.5f);  // a second call adds: 3 g + 0.5 g
  expect_multiple(3.5f);
  // A power of two scales every rounding step exactly.
  m.zero_grad();
  m.forward_backward(batch, 0.25f);
  size_t k = 0;
  for (auto* p : m.parameters()) {
    auto g = p->grad.to_vector();
    for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], 0.25f * g1[k][i]) << p->name;
    ++k;
  }
}

TEST(GPT, NoGradRetainsNothingAndTrainingFreesEverything) {
  GPTConfig c = tiny_config();
  c.layers = 4;
  c.d_model = 32;
  c.context = 32;
  GPT m(c);
  nn::Batch batch = make_batch(2, 32, c.vocab, 5);
  m.forward_backward(batch, 1.0f);  // warm-up: lazily made caches exist from here on
  const size_t base = memory_stats().of(MemoryKind::activation);

  reset_peak_memory();
  nn::LossSum train = m.forward_backward(batch, 1.0f);
  const size_t train_peak = memory_stats().peak_of(MemoryKind::activation) - base;
  EXPECT_EQ(memory_stats().of(MemoryKind::activation), base);

  reset_peak_memory();
  nn::LossSum eval = m.evaluate(batch);
  const size_t eval_peak = memory_stats().peak_of(MemoryKind::activation) - base;
  EXPECT_EQ(memory_stats().of(MemoryKind::activation), base);
  EXPECT_NEAR(eval.sum, train.sum, 1e-6 * std::abs(train.sum));
  EXPECT_EQ(eval.count, train.count);
  // Training keeps every layer's activations; evaluation only a layer's worth.
  EXPECT_LT(eval_peak * 3, train_peak) << "eval peak " << eval_peak << " train peak " << train_peak;

  autograd::NoGrad no_grad;
  autograd::Tape t;
  Tensor logits = m.forward(t, batch.inputs).value;
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(logits.shape(), (Shape{2, 32, c.vocab}));
}

namespace {
// One training pass of `m` under a precision policy: loss, gradients and memory.
struct PolicyRun {
  nn::LossSum loss;
  std::vector<std::vector<float>> grads;
  size_t saved = 0;  // activation bytes kept for backward at the end of the forward pass
  size_t peak = 0;   // activation peak over forward + backward
};
PolicyRun run_policy(GPT& m, const nn::Batch& batch, const autograd::PrecisionPolicy& policy) {
  PolicyRun r;
  m.set_precision(policy);
  m.forward_backward(batch, 1.0f);  // warm-up (weight casts)
  const size_t base = memory_stats().of(MemoryKind::activation);
  {
    autograd::Tape t(m.context(true));
    autograd::Var logits = m.forward(t, batch.inputs);
    const size_t with_logits = memory_stats().of(MemoryKind::activation);
    r.saved = with_logits - logits.value.bytes() - base;
  }
  m.zero_grad();
  reset_peak_memory();
  r.loss = m.forward_backward(batch, 1.0f);
  r.peak = memory_stats().peak_of(MemoryKind::activation) - base;
  for (auto* p : m.parameters()) r.grads.push_back(p->grad.to_vector());
  return r;
}

GPTConfig policy_config() {
  GPTConfig c = tiny_config();
  c.layers = 2;
  c.d_model = 64;
  c.heads = 4;
  c.context = 32;
  return c;
}
}  // namespace

TEST(GPT, Bf16PolicyIsCloseToFp32AndHalvesSavedActivations) {
  GPTConfig c = policy_config();
  GPT m(c);
  nn::Batch batch = make_batch(4, 32, c.vocab, 6);
  auto run = [&](const autograd::PrecisionPolicy& policy) { return run_policy(m, batch, policy); };
  auto policy = [](DType matmul, DType saved) {
    autograd::PrecisionPolicy p;
    p.matmul = matmul;
    p.saved = saved;
    return p;
  };
  PolicyRun f32 = run(policy(DType::f32, DType::f32));
  PolicyRun bf16 = run(policy(DType::bf16, DType::bf16));
  PolicyRun saved16 = run(policy(DType::f32, DType::bf16));
  EXPECT_NEAR(bf16.loss.sum, f32.loss.sum, 0.01 * f32.loss.sum);
  size_t k = 0;
  for (auto* p : m.parameters()) {
    EXPECT_LT(rel_error(bf16.grads[k], f32.grads[k]), 0.05) << p->name;
    EXPECT_LT(rel_error(saved16.grads[k], f32.grads[k]), 0.05) << p->name;
    ++k;
  }
  // bf16 and fp32 must differ somewhere, else the policy did nothing.
  EXPECT_GT(rel_error(bf16.grads[4], f32.grads[4]), 1e-5);
  EXPECT_GT(rel_error(saved16.grads[4], f32.grads[4]), 1e-5);
  // Saved activations: 16-bit copies plus small fp32 statistics (LN mean/rstd).
  EXPECT_LT(bf16.saved * 100, f32.saved * 53) << "bf16 " << bf16.saved << " fp32 " << f32.saved;
  EXPECT_LT(saved16.saved * 100, f32.saved * 53) << "saved bf16 " << saved16.saved << " fp32 " << f32.saved;
  EXPECT_LT(bf16.peak, f32.peak);
}

// Issue 6 items 4 and 7: an FP8 recipe keeps what backward needs in 1 byte
// (the products their operands' codes, the other ops e4m3fn copies with a
// per-tensor scale), about half of what bf16-amp keeps. Each op's gradient
// with 1-byte saves is bounded in autograd/test_saved.cpp; here the whole
// model's stays close to the same recipe with bf16 saves.
TEST(GPT, Fp8RecipeKeepsSavedActivationsInOneByte) {
  GPTConfig c = policy_config();
  GPT m(c);
  nn::Batch batch = make_batch(4, 32, c.vocab, 6);
  recipe::Recipe r = recipe::find_recipe("fp8-current");
  ASSERT_EQ(r.saved_format, "e4m3fn");
  PolicyRun fp8 = run_policy(m, batch, amp::precision_policy(r, &m));
  recipe::set_recipe_field(r, "saved_format", "bf16");
  PolicyRun fp8_bf16 = run_policy(m, batch, amp::precision_policy(r, &m));
  PolicyRun bf16 = run_policy(m, batch, amp::precision_policy(recipe::find_recipe("bf16-amp"), &m));
  EXPECT_LT(fp8.saved * 100, bf16.saved * 55) << "fp8 " << fp8.saved << " bf16-amp " << bf16.saved;
  EXPECT_LT(fp8.saved * 100, fp8_bf16.saved * 75) << "fp8 " << fp8.saved << " with bf16 saves " << fp8_bf16.saved;
  EXPECT_LT(fp8.peak, fp8_bf16.peak);
  EXPECT_EQ(fp8.loss.sum, fp8_bf16.loss.sum);  // saves change the backward pass only
  // The recipe's gradient error against fp32 comes from its casts; the 1-byte
  // saves hardly add to it.
  PolicyRun f32 = run_policy(m, batch, amp::precision_policy(recipe::find_recipe("fp32"), &m));
  std::vector<float> all8, all16, all32;
  size_t k = 0;
  for (auto* p : m.parameters()) {
    EXPECT_LT(rel_error(fp8.grads[k], f32.grads[k]), 1.5 * rel_error(fp8_bf16.grads[k], f32.grads[k]) + 0.01)
        << p->name;
    all8.insert(all8.end(), fp8.grads[k].begin(), fp8.grads[k].end());
    all16.insert(all16.end(), fp8_bf16.grads[k].begin(), fp8_bf16.grads[k].end());
    all32.insert(all32.end(), f32.grads[k].begin(), f32.grads[k].end());
    ++k;
  }
  EXPECT_LT(rel_error(all8, all32), 1.1 * rel_error(all16, all32));  // 0.0708 and 0.0712 here
}

TEST(GPT, DropoutOnlyInTraining) {
  GPTConfig c = tiny_config();
  c.dropout = 0.2f;
  GPT m(c);
  randomise(m, 13);
  nn::Batch batch = make_batch(2, 8, c.vocab, 7);
  nn::LossSum e1 = m.evaluate(batch), e2 = m.evaluate(batch);
  EXPECT_EQ(e1.sum, e2.sum);
  nn::LossSum t1 = m.forward_backward(batch, 1.0f), t2 = m.forward_backward(batch, 1.0f);
  EXPECT_NE(t1.sum, e1.sum);
  EXPECT_NE(t1.sum, t2.sum);  // a new mask every pass
}

TEST(GPT, BadBatchesAreRejected) {
  GPT m(tiny_config());
  nn::Batch too_long = make_batch(1, 11, 64, 8);
  EXPECT_THROW(m.forward_backward(too_long, 1.0f), std::invalid_argument);
  nn::Batch b = make_batch(1, 4, 64, 8);
  b.inputs.data<int32_t>()[2] = 64;
  EXPECT_THROW(m.evaluate(b), std::out_of_range);
  nn::Batch mismatched{make_batch(1, 4, 64, 8).inputs, Tensor::empty({1, 3}, DType::i32)};
  EXPECT_THROW(m.evaluate(mismatched), std::invalid_argument);
  GPTConfig bad = tiny_config();
  bad.heads = 3;
  EXPECT_THROW(GPT{bad}, std::invalid_argument);
}

TEST(GPT, ActivationCheckpointingGivesIdenticalGradientsWithLessMemory) {
  GPTConfig c = tiny_config();
  c.layers = 4;
  c.d_model = 32;
  c.context = 32;
  c.dropout = 0.1f;  // the recomputation must replay the same masks
  nn::Batch batch = make_batch(2, 32, c.vocab, 9);
  struct Run {
    double loss;
    std::vector<std::vector<float>> grads;
    size_t peak;
  };
  auto run = [&](int every) {
    GPT m(c);
    m.set_activation_checkpointing(every);
    m.forward_backward(batch, 1.0f);  // warm-up; advances the dropout stream identically
    m.zero_grad();
    const size_t base = memory_stats().of(MemoryKind::activation);
    reset_peak_memory();
    Run r{m.forward_backward(batch, 1.0f).sum, {}, 0};
    r.peak = memory_stats().peak_of(MemoryKind::activation) - base;
    for (auto* p : m.parameters()) r.grads.push_back(p->grad.to_vector());
    return r;
  };
  Run plain = run(0), every = run(1), alternate = run(2);
  EXPECT_EQ(every.loss, plain.loss);
  EXPECT_EQ(alternate.loss, plain.loss);
  for (size_t k = 0; k < plain.grads.size(); ++k) {
    EXPECT_EQ(every.grads[k], plain.grads[k]) << k;
    EXPECT_EQ(alternate.grads[k], plain.grads[k]) << k;
  }
  EXPECT_LT(every.peak * 2, plain.peak) << "checkpointed " << every.peak << " plain " << plain.peak;
  EXPECT_LT(every.peak, alternate.peak);
}
