// Adam/AdamW with low-precision moments: every step against a
// float64 Adam that applies the same rounding of m and v (per-tensor
// power-of-two scale from the new moment's max, round to nearest-even in the
// format, decode), checkpoint round trips of the 1- and 2-byte state, the
// allocator's byte counts, and short GPT training runs that must still learn.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "mantissa/formats/round.hpp"
#include "mantissa/io/safetensors.hpp"
#include "mantissa/nn/gpt.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "optim/random_parameter.hpp"
#include "tiny_gpt.hpp"

using namespace mantissa;
using autograd::Parameter;

namespace {

std::vector<Parameter> make_params(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<Parameter> ps;
  // Sizes straddle the 16384-element chunks; one parameter has gradients near
  // 1e-8 so its v is ~1e-19 and only a per-tensor scale keeps it in fp16.
  const std::vector<std::pair<std::string, Shape>> specs = {
      {"w.big", {2, 16384 + 77}}, {"b.small", {7}}, {"w.tiny_grad", {300}}, {"ln.gain", {33}}};
  for (const auto& [name, shape] : specs) {
    ps.push_back(mantissa::optim_test::random_parameter(name, shape, rng, nd));
  }
  return ps;
}

std::vector<Parameter*> ptrs(std::vector<Parameter>& ps) {
  std::vector<Parameter*> out;
  for (auto& p : ps) out.push_back(&p);
  return out;
}

void set_grads(std::vector<Parameter>& ps, int k, std::mt19937_64& rng) {
  std::normal_distribution<double> nd(0.0, 1.0);
  for (auto& p : ps) {
    const double mag = p.name == "w.tiny_grad" ? 1e-8 : 1.0;
    for (int64_t i = 0; i < p.grad.numel(); ++i)
      p.grad.f32()[i] = static_cast<float>(mag * (std::sin(0.37 * static_cast<double>(i) + 1.3 * k) + 0.3 * nd(rng)));
  }
}

// Independent scale rule: the power of two 2^e, e minimal, with amax / 2^e <= max.
double ref_scale(double amax, double fmt_max, double previous) {
  if (!(amax > 0)) return previous;
  int e = 0;
  std::frexp(amax / fmt_max, &e);  // amax/max = f 2^e, f in [0.5, 1)
  if (std::ldexp(fmt_max, e - 1) >= amax) --e;
  return std::ldexp(1.0, e);
}

double round_to(const formats::Format& f, double x) { return formats::decode(f, formats::encode(f, x)); }

struct StepCheck {
  int64_t elements = 0, moment_mismatches = 0;
  double worst_p = 0;  // max |p - p_ref| / (|p_ref| * 1e-6 + lr * 1e-6)
};

// One AdamW step in float64 from the optimizer's current (decoded) state,
// compared with the optimizer's own step.
void step_and_compare(optim::Adam& opt, std::vector<Parameter>& ps, double lr, const optim::OptimizerConfig& c,
                      StepCheck& chk) {
  const auto before = opt.state_tensors();
  std::vector<std::vector<double>> p0, m0, v0;
  for (auto& p : ps) {
    p0.emplace_back(p.value.f32(), p.value.f32() + p.value.numel());
    auto m = before.at(p.name + ".exp_avg").to_vector(), v = before.at(p.name + ".exp_avg_sq").to_vector();
    m0.emplace_back(m.begin(), m.end());
    v0.emplace_back(v.begin(), v.end());
  }
  const int t = static_cast<int>(opt.step_count()) + 1;
  opt.step(lr);
  const auto after = opt.state_tensors();
  const auto& fm = formats::preset(dtype_format_name(opt.state_format().m));
  const auto& fv = formats::preset(dtype_format_name(opt.state_format().v));
  const double bc1 = 1.0 - std::pow(c.beta1, t), bc2 = 1.0 - std::pow(c.beta2, t);
  for (size_t j = 0; j < ps.size(); ++j) {
    const Parameter& prm = ps[j];
    const auto n = static_cast<size_t>(prm.value.numel());
    const double wd = prm.decay ? c.weight_decay : 0.0;
    std::vector<double> m(n), v(n);
    double am = 0, av = 0;
    for (size_t i = 0; i < n; ++i) {
      const double g = prm.grad.f32()[i];
      m[i] = c.beta1 * m0[j][i] + (1 - c.beta1) * g;
      v[i] = c.beta2 * v0[j][i] + (1 - c.beta2) * g * g;
      am = std::max(am, std::abs(m[i]));
      av = std::max(av, v[i]);
      const double p = p0[j][i] * (1 - lr * wd) - lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + c.eps);
      const double err = std::abs(prm.value.f32()[i] - p) / (1e-6 * std::abs(p) + 1e-6 * lr);
      chk.worst_p = std::max(chk.worst_p, err);
    }
    const Tensor& tm = after.at(prm.name + ".exp_avg");
    const Tensor& tv = after.at(prm.name + ".exp_avg_sq");
    const bool m_scaled = optim::state_dtype_scaled(tm.dtype()), v_scaled = optim::state_dtype_scaled(tv.dtype());
    const double sm = m_scaled ? ref_scale(am, fm.max(), before.at(prm.name + ".exp_avg").scale()) : 1.0;
    const double sv = v_scaled ? ref_scale(av, fv.max(), before.at(prm.name + ".exp_avg_sq").scale()) : 1.0;
    // A max within fp32 rounding of a power-of-two boundary could pick the
    // neighbouring scale; the draws here keep clear of that, so exact.
    EXPECT_EQ(tm.scale(), sm) << prm.name << " step " << t;
    EXPECT_EQ(tv.scale(), sv) << prm.name << " step " << t;
    const auto mq = tm.to_vector(), vq = tv.to_vector();
    for (size_t i = 0; i < n; ++i) {
      const double rm = round_to(fm, m[i] / sm) * sm, rv = round_to(fv, v[i] / sv) * sv;
      if (!m_scaled && tm.dtype() == DType::f32) {  // fp32 moment: fp32 arithmetic vs fp64
        EXPECT_NEAR(mq[i], m[i], 1e-6 * std::abs(m[i]) + 1e-30) << prm.name;
        continue;
      }
      ++chk.elements;
      if (mq[i] != rm || vq[i] != rv) {
        ++chk.moment_mismatches;  // fp32 vs fp64 moment on a rounding tie: one code apart at most
        // m = b1 m0 + (1-b1) g cancels: fp32's error is relative to the terms.
        const double fp32_err = 1e-6 * (std::abs(m0[j][i]) + std::abs(prm.grad.f32()[i]));
        EXPECT_LE(std::abs(mq[i] - rm), 2 * fm.epsilon() * (std::abs(rm) + fp32_err) + fp32_err + fm.min_subnormal() * sm)
            << prm.name;
        EXPECT_LE(std::abs(vq[i] - rv), 2 * fv.epsilon() * std::abs(rv) + fv.min_subnormal() * sv) << prm.name;
      }
    }
  }
}

class LowPrecisionAdam : public ::testing::TestWithParam<const char*> {};

TEST_P(LowPrecisionAdam, EveryStepMatchesFloat64AdamWithTheSameMomentRounding) {
  auto ps = make_params(3);
  optim::OptimizerConfig c;
  c.type = "adamw";
  c.weight_decay = 0.1;
  c.state_format = optim::parse_state_format(GetParam());
  auto base = optim::make_optimizer(c, ptrs(ps));
  auto& opt = dynamic_cast<optim::Adam&>(*base);
  std::mt19937_64 rng(11);
  StepCheck chk;
  for (int k = 0; k < 8; ++k) {
    set_grads(ps, k, rng);
    step_and_compare(opt, ps, 1e-3 * (1 + 0.2 * k), c, chk);
  }
  EXPECT_LT(chk.worst_p, 4.0);  // p within a few fp32 roundings
  EXPECT_LE(chk.moment_mismatches, chk.elements / 1000) << chk.moment_mismatches << " of " << chk.elements;
}

INSTANTIATE_TEST_SUITE_P(Formats, LowPrecisionAdam,
                         ::testing::Values("bf16", "fp16", "e4m3fn/fp16", "e4m3fn", "e5m2/bf16"),
                         [](const auto& param_info) {
                           std::string s = param_info.param;
                           for (char& ch : s)
                             if (ch == '/') ch = '_';
                           return s;
                         });

TEST(LowPrecisionAdam, Fp32MomentInTheTwoPassPathIsBitIdenticalToTheFp32Path) {
  // "fp32/fp16" runs the two-pass path with an fp32 first moment. With no
  // weight decay m depends on the gradients only, so it must match the
  // single-pass fp32 path bit for bit at every step (same fused operations),
  // while p differs slightly through the fp16 second moment.
  auto a = make_params(5), b = make_params(5);
  optim::OptimizerConfig c;
  auto oa = optim::make_optimizer(c, ptrs(a));
  c.state_format = optim::parse_state_format("fp32/fp16");
  auto ob = optim::make_optimizer(c, ptrs(b));
  EXPECT_TRUE(dynamic_cast<optim::Adam&>(*oa).state_format().is_fp32());
  EXPECT_FALSE(dynamic_cast<optim::Adam&>(*ob).state_format().is_fp32());
  std::mt19937_64 r1(1), r2(1);
  double worst = 0;
  for (int k = 0; k < 3; ++k) {
    set_grads(a, k, r1);
    set_grads(b, k, r2);
    oa->step(1e-3);
    ob->step(1e-3);
    const auto sa = oa->state_tensors(), sb = ob->state_tensors();
    for (const auto& p : a) {
      const Tensor& ma = sa.at(p.name + ".exp_avg");
      const Tensor& mb = sb.at(p.name + ".exp_avg");
      ASSERT_EQ(mb.dtype(), DType::f32);
      for (int64_t i = 0; i < ma.numel(); ++i) ASSERT_EQ(ma.f32()[i], mb.f32()[i]) << p.name << " step " << k;
    }
    for (size_t j = 0; j < a.size(); ++j)
      for (int64_t i = 0; i < a[j].value.numel(); ++i)
        worst = std::max(worst, std::abs(static_cast<double>(a[j].value.f32()[i]) - b[j].value.f32()[i]));
  }
  EXPECT_GT(worst, 0.0);   // v really was rounded
  EXPECT_LT(worst, 3e-5);  // by about fp16's 2^-11 of an update of 1e-3 per step
}

TEST(StateFormat, ParsesNamesAndRefusesBadOnes) {
  EXPECT_EQ(optim::parse_state_format("fp32").m, DType::f32);
  const auto f = optim::parse_state_format("e4m3fn/fp16");
  EXPECT_EQ(f.m, DType::e4m3fn);
  EXPECT_EQ(f.v, DType::f16);
  EXPECT_EQ(optim::state_format_name(f), "e4m3fn/fp16");
  EXPECT_EQ(optim::state_format_name(optim::parse_state_format("f16/fp16")), "fp16");
  for (const char* bad : {"fp33", "e4m3fn/", "fp16/fp16/fp16", "", "i32", "e4m3"}) {
    try {
      optim::parse_state_format(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("optimizer state format"), std::string::npos) << e.what();
    }
  }
}

TEST(StateFormat, ScaleIsTheSmallestPowerOfTwoThatFits) {
  EXPECT_EQ(optim::state_scale_for(DType::e4m3fn, 448.0f, 7.0f), 1.0f);
  EXPECT_EQ(optim::state_scale_for(DType::e4m3fn, 448.5f, 7.0f), 2.0f);
  EXPECT_EQ(optim::state_scale_for(DType::e4m3fn, 224.0f, 7.0f), 0.5f);
  EXPECT_EQ(optim::state_scale_for(DType::e4m3fn, 1e-6f, 7.0f), std::ldexp(1.0f, -28));  // 1e-6/2^-28 = 268
  EXPECT_EQ(optim::state_scale_for(DType::f16, 65504.0f * 3, 7.0f), 4.0f);
  EXPECT_EQ(optim::state_scale_for(DType::f16, 0.0f, 7.0f), 7.0f);  // zero: any scale, keep
  EXPECT_EQ(optim::state_scale_for(DType::f16, NAN, 7.0f), 7.0f);
  EXPECT_EQ(optim::state_scale_for(DType::bf16, 1e30f, 7.0f), 1.0f);
}

TEST(LowPrecisionAdam, StateRoundTripsThroughSafetensorsAndResumesBitExactly) {
  auto a = make_params(9), b = make_params(9);
  optim::OptimizerConfig c;
  c.state_format = optim::parse_state_format("e4m3fn/fp16");
  auto oa = optim::make_optimizer(c, ptrs(a));
  std::mt19937_64 rng(4);
  for (int k = 0; k < 3; ++k) {
    set_grads(a, k, rng);
    oa->step(1e-3);
  }
  std::vector<std::pair<std::string, Tensor>> named;
  for (const auto& [name, t] : oa->state_tensors()) named.emplace_back(name, t);
  EXPECT_EQ(oa->state_tensors().at("w.big.exp_avg").dtype(), DType::e4m3fn);
  EXPECT_EQ(oa->state_tensors().at("w.big.exp_avg_sq").dtype(), DType::f16);
  EXPECT_NE(oa->state_tensors().at("w.tiny_grad.exp_avg_sq").scale(), 1.0f);
  const auto file = io::decode_safetensors(io::encode_safetensors(named), "optimizer.safetensors",
                                           MemoryKind::optimizer_state);
  for (size_t j = 0; j < a.size(); ++j) std::copy_n(a[j].value.f32(), a[j].value.numel(), b[j].value.f32());
  auto ob = optim::make_optimizer(c, ptrs(b));
  ob->load_state(file.tensors, oa->state_json());
  for (int k = 3; k < 5; ++k) {
    set_grads(a, k, rng);
    for (size_t j = 0; j < a.size(); ++j) std::copy_n(a[j].grad.f32(), a[j].grad.numel(), b[j].grad.f32());
    oa->step(1e-3);
    ob->step(1e-3);
  }
  for (size_t j = 0; j < a.size(); ++j)
    for (int64_t i = 0; i < a[j].value.numel(); ++i) ASSERT_EQ(a[j].value.f32()[i], b[j].value.f32()[i]) << a[j].name;

  // State saved in another format is refused with the tensor named.
  optim::OptimizerConfig c16 = c;
  c16.state_format = optim::parse_state_format("fp16");
  auto oc = optim::make_optimizer(c16, ptrs(b));
  try {
    oc->load_state(file.tensors, oa->state_json());
    ADD_FAILURE() << "e4m3fn state loaded into an fp16 optimizer";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("exp_avg"), std::string::npos) << e.what();
  }
}

// A scaled state whose codes times its scale overflow float32 (an e4m3 code
// of 448 at scale 2^127) or that decode to a negative second moment is
// refused by name before it can turn the weights into NaN.
TEST(LowPrecisionAdam, StateValuesOutOfRangeAreRefused) {
  auto a = make_params(3);
  optim::OptimizerConfig c;
  c.state_format = optim::parse_state_format("e4m3fn/e4m3fn");
  auto oa = optim::make_optimizer(c, ptrs(a));
  std::mt19937_64 rng(5);
  set_grads(a, 0, rng);
  oa->step(1e-3);
  const std::map<std::string, Tensor> good = oa->state_tensors();
  auto expect_error = [&](const std::map<std::string, Tensor>& t, const std::string& needle) {
    auto ob = optim::make_optimizer(c, ptrs(a));
    try {
      ob->load_state(t, oa->state_json());
      ADD_FAILURE() << "no error, expected one mentioning " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const std::string m = "w.big.exp_avg", v = "w.big.exp_avg_sq";
  auto huge = good;
  huge[m] = good.at(m).clone();
  huge[m].set_scale(0x1p127f);
  expect_error(huge, "overflows float32");
  auto negative = good;
  negative[v] = good.at(v).clone();
  static_cast<uint8_t*>(negative[v].raw())[2] = 0xB8;  // e4m3fn -1.0
  expect_error(negative, "'" + v + "' holds -");
  auto nan = good;
  nan[m] = good.at(m).clone();
  static_cast<uint8_t*>(nan[m].raw())[0] = 0x7F;  // e4m3fn NaN
  expect_error(nan, "'" + m + "' holds non-finite values (at element 0)");
  auto ob = optim::make_optimizer(c, ptrs(a));
  EXPECT_NO_THROW(ob->load_state(good, oa->state_json()));
}

TEST(LowPrecisionAdam, AllocatorCountsTheStateBytesOfEachFormat) {
  auto ps = make_params(2);
  int64_t numel = 0;
  for (const auto& p : ps) numel += p.value.numel();
  const std::vector<std::pair<const char*, int64_t>> bytes_per_element = {
      {"fp32", 8}, {"bf16", 4}, {"fp16", 4}, {"e4m3fn/fp16", 3}, {"e4m3fn", 2}};
  for (const auto& [fmt, per] : bytes_per_element) {
    const size_t before = optim::training_state_bytes().optimizer_state;
    optim::OptimizerConfig c;
    c.state_format = optim::parse_state_format(fmt);
    auto opt = optim::make_optimizer(c, ptrs(ps));
    EXPECT_EQ(optim::training_state_bytes().optimizer_state - before, static_cast<size_t>(numel * per)) << fmt;
  }
}

// Reference GPT (4 layers, d_model 256, 3.3M parameters): parameters +
// gradients + Adam state per format, from the allocator.
TEST(LowPrecisionAdam, ReferenceGptTrainingStateMemory) {
  nn::GPT model(nn::GPTConfig{});
  int64_t numel = 0;
  for (const Parameter* p : model.parameters()) numel += p->value.numel();
  for (const char* fmt : {"fp32", "bf16", "fp16", "e4m3fn/fp16", "e4m3fn"}) {
    optim::OptimizerConfig c;
    c.state_format = optim::parse_state_format(fmt);
    const auto before = optim::training_state_bytes();
    auto opt = optim::make_optimizer(c, model.parameters());
    const auto with = optim::training_state_bytes();
    const size_t state = with.optimizer_state - before.optimizer_state;
    const auto f = optim::parse_state_format(fmt);
    int64_t unique = 0;  // the tied lm_head is one tensor with wte
    for (const Parameter* p : opt->parameters()) unique += p->value.numel();
    EXPECT_EQ(state, static_cast<size_t>(unique) * (dtype_size(f.m) + dtype_size(f.v))) << fmt;
    std::printf("[memory] %-12s params %zu grads %zu state %zu total %zu bytes (%.2f MiB)\n", fmt, with.parameters,
                with.gradients, state, with.parameters + with.gradients + state,
                static_cast<double>(with.parameters + with.gradients + state) / (1 << 20));
  }
  EXPECT_GT(numel, 3'000'000);
}

// A next-token task a small GPT learns in a few dozen steps: each token
// determines the next (tiny_gpt.hpp's recurrence, a permutation of the vocabulary).
double train_tiny_gpt(const char* state_format, double* first_loss) {
  omp_set_num_threads(1);  // tiny shapes: threads only add synchronisation on a busy machine
  nn::GPT model(tiny_gpt_config(1, 5));
  optim::OptimizerConfig c;
  c.state_format = optim::parse_state_format(state_format);
  auto opt = optim::make_optimizer(c, model.parameters());
  std::mt19937_64 rng(8);
  const int64_t B = 4, T = 16;
  double loss = 0;
  for (int step = 0; step < 25; ++step) {
    const nn::Batch b = recurrence_batch(rng, B);
    model.zero_grad();
    const nn::LossSum l = model.forward_backward(b, 1.0f / static_cast<float>(B * T));
    loss = l.sum / static_cast<double>(l.count);
    if (step == 0) *first_loss = loss;
    opt->step(2e-2);
  }
  return loss;
}

TEST(LowPrecisionAdam, TinyGptStillLearnsWithFp16AndFp8State) {
  double first = 0;
  const double fp32 = train_tiny_gpt("fp32", &first);
  EXPECT_NEAR(first, std::log(32.0), 0.3);
  EXPECT_LT(fp32, 0.5 * first);
  for (const char* fmt : {"fp16", "e4m3fn/fp16"}) {
    double f0 = 0;
    const double last = train_tiny_gpt(fmt, &f0);
    std::printf("[tiny-gpt] %-12s loss %.4f -> %.4f (fp32 %.4f)\n", fmt, f0, last, fp32);
    EXPECT_EQ(f0, first) << fmt;  // same model, same first batch
    EXPECT_LT(last, 0.5 * first) << fmt;
    EXPECT_LT(last, 1.5 * fp32 + 0.05) << fmt;
  }
}

}  // namespace
