// The unit-scaled GPT and MLP. Unit scaling changes backward scales
// on purpose, so a unit gradient is not the loss gradient; but every scale
// either ties forward and backward (non-cut edges: linear inputs, GELU,
// attention, adds) or sits at a parameter leaf, at the loss and the readout,
// or at a residual branch (residual_add scales the branch forward by tau/d
// but hands it the gradient unscaled; residual_split applies tau/d on the
// way out). Hence for every parameter p:
//   unit_grad(p) = c_loss x c_readout x c_branch(p) x c_leaf(p) x d(sum of losses)/dp
// with the factors read off the rules. The tests check that identity against
// central finite differences of the model's own forward, element by element.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

#include "mantissa/nn/gpt.hpp"
#include "mantissa/nn/mlp.hpp"
#include "mantissa/unit/rules.hpp"
#include "mantissa/train/session.hpp"

using namespace mantissa;
namespace us = mantissa::unit;

namespace {

nn::Batch token_batch(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  std::mt19937_64 g(seed);
  nn::Batch b{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
  for (int64_t i = 0; i < B * T; ++i) {
    b.inputs.data<int32_t>()[i] = static_cast<int32_t>(g() % V);
    b.targets.data<int32_t>()[i] = i % 7 == 3 ? -1 : static_cast<int32_t>(g() % V);
  }
  return b;
}

// Checks unit_grad / factor(p) against central differences of the summed loss
// at the largest-gradient element and three random ones of every parameter.
void check_against_fd(nn::Model& m, const nn::Batch& batch, const std::function<double(const autograd::Parameter&)>& factor,
                      int64_t count) {
  m.zero_grad();
  m.forward_backward(batch, 1.0f / static_cast<float>(count));  // one micro-batch: seed 1
  std::mt19937_64 g(5);
  const float h = 1e-2f;
  int checked = 0;
  for (autograd::Parameter* p : m.parameters()) {
    SCOPED_TRACE(p->name);
    const auto grad = p->grad.to_vector();
    const double c = factor(*p);
    size_t top = 0;
    for (size_t i = 0; i < grad.size(); ++i)
      if (std::fabs(grad[i]) > std::fabs(grad[top])) top = i;
    const double scale = std::fabs(grad[top]) / c;
    std::vector<size_t> picks{top, g() % grad.size(), g() % grad.size()};
    for (size_t i : picks) {
      float* v = p->value.f32() + i;
      const float keep = *v;
      *v = keep + h;
      ++p->version;
      const double up = m.evaluate(batch).sum;
      *v = keep - h;
      ++p->version;
      const double down = m.evaluate(batch).sum;
      *v = keep;
      ++p->version;
      const double fd = (up - down) / (2.0 * h);
      EXPECT_NEAR(grad[i] / c, fd, 0.03 * scale + 2e-3) << "element " << i << ", factor " << c;
      ++checked;
    }
  }
  EXPECT_GE(checked, 18);
}

nn::GPTConfig tiny_gpt(const std::string& rule_set) {
  nn::GPTConfig c;
  c.vocab = 16;
  c.context = 8;
  c.layers = 2;
  c.d_model = 8;
  c.heads = 2;
  c.seed = 11;
  c.unit.enabled = true;
  c.unit.rule_set = rule_set;
  return c;
}


// The residual taus of every block: (attention, MLP).
using Taus = std::vector<std::pair<double, double>>;

// unit_grad(p) = c_loss c_readout c_branch(p) c_leaf(p) d(sum of losses)/dp, checked by central differences.
void check_unit_gpt_gradients(const nn::GPTConfig& cfg, const Taus& taus) {
  {
    nn::GPT m(cfg);
    const int64_t B = 2, T = 8, N = B * T, C = cfg.d_model, V = cfg.vocab;
    const nn::Batch batch = token_batch(B, T, V, 3);
    int64_t count = 0;
    for (int64_t i = 0; i < N; ++i) count += batch.targets.data<int32_t>()[i] >= 0;
    const us::Rules lin = cfg.unit.rules("linear");
    // Non-cut edges carry equal forward and backward scales: nothing to correct there.
    const us::Scales s_attn = us::linear(C, 3 * C, N, lin);
    ASSERT_DOUBLE_EQ(s_attn.fwd, s_attn.bwd[0]);
    const us::Scales gelu = us::gelu(1.0, cfg.unit.rules("gelu"));
    ASSERT_DOUBLE_EQ(gelu.fwd, gelu.bwd[0]);
    const us::LossScales ce = us::cross_entropy(V, N);
    const us::Scales ro = us::linear_readout(C, V, N, cfg.unit.rules("readout"));
    const double c_loss = ce.bwd[0] / ce.input_fwd, c_ro = ro.bwd[0] / ro.fwd;
    auto factor = [&](const autograd::Parameter& p) -> double {
      if (p.name == "lm_head.weight") return c_loss * ro.bwd[1] / ro.fwd;
      double leaf = 1;
      if (p.name == "transformer.wte.weight") leaf = us::embedding(V, N).bwd[0];
      else if (p.name == "transformer.wpe.weight") leaf = us::embedding(T, N).bwd[0];
      else if (p.name.find("ln_") != std::string::npos) leaf = us::layer_norm(C, N * C).bwd[1];
      else if (p.value.ndim() == 2) {
        const us::Scales s = us::linear(p.value.dim(0), p.value.dim(1), N, lin);
        leaf = s.bwd[1] / s.fwd;
      } else {
        leaf = us::linear(C, C, N, lin).bwd[2];  // biases are added after the forward scale
      }
      // Post-norm: ln_1 and ln_2 follow the residual adds, outside the branches.
      double branch = 1;
      const size_t layer = p.name.rfind("transformer.h.", 0) == 0 ? std::stoul(p.name.substr(14)) : 0;
      const bool pre = cfg.pre_norm;
      if ((pre && p.name.find(".ln_1.") != std::string::npos) || p.name.find(".attn.") != std::string::npos)
        branch = 1.0 / us::residual(taus.at(layer).first).branch;
      if ((pre && p.name.find(".ln_2.") != std::string::npos) || p.name.find(".mlp.") != std::string::npos)
        branch = 1.0 / us::residual(taus.at(layer).second).branch;
      return c_loss * c_ro * branch * leaf;
    };
    check_against_fd(m, batch, factor, count);
  }
}

}  // namespace

TEST(UnitGPT, GradientsAreScaledLossGradients) {
  for (const bool pre : {true, false})
    for (const char* set : {"library", "paper"}) {
      SCOPED_TRACE(std::string(set) + (pre ? " pre-norm" : " post-norm"));
      nn::GPTConfig cfg = tiny_gpt(set);
      cfg.pre_norm = pre;
      check_unit_gpt_gradients(cfg, Taus(2, {cfg.unit.tau_attn, cfg.unit.tau_mlp}));
    }
}

// u-muP: no norm parameters, and block l's taus are u-muP's depth rule for
// residuals 2l and 2l+1 of 2L (unit::transformer_residual_tau, checked
// against the library's goldens in unit_test_unit_golden).
TEST(UmupGPT, GradientsAreScaledLossGradientsWithDepthTaus) {
  for (const auto& [mult, ratio] : {std::pair{1.0, 1.0}, std::pair{2.0, 0.5}}) {
    nn::GPTConfig cfg = tiny_gpt("library");
    cfg.unit.umup = true;
    cfg.unit.residual_mult = mult;
    cfg.unit.residual_attn_ratio = ratio;
    Taus taus;
    for (int l = 0; l < 2; ++l)
      taus.emplace_back(us::transformer_residual_tau(2 * l, 4, mult, ratio), us::transformer_residual_tau(2 * l + 1, 4, mult, ratio));
    ASSERT_NE(taus[0].first, taus[1].first);  // the taus do depend on depth
    check_unit_gpt_gradients(cfg, taus);
  }
}

// One block: the u-muP GPT computes exactly what the unit GPT does with its
// two taus set to the depth rule's and the norms at their initial gain 1 and
// shift 0, from the same random draws; only the norm parameters are gone.
TEST(UmupGPT, EqualsTheUnitGPTWithThoseTausAndFixedNorms) {
  nn::GPTConfig u = tiny_gpt("library");
  u.layers = 1;
  nn::GPTConfig m = u;
  m.unit.umup = true;
  u.unit.tau_attn = us::transformer_residual_tau(0, 2);
  u.unit.tau_mlp = us::transformer_residual_tau(1, 2);
  nn::GPT unit(u), umup(m);
  const nn::Batch batch = token_batch(2, 8, u.vocab, 3);
  EXPECT_EQ(umup.evaluate(batch).sum, unit.evaluate(batch).sum);
  const auto a = unit.logits(batch.inputs).to_vector(), b = umup.logits(batch.inputs).to_vector();
  EXPECT_EQ(a, b);
  int64_t norms = 0;
  for (autograd::Parameter* p : unit.parameters()) norms += p->name.find("ln_") != std::string::npos ? p->value.numel() : 0;
  EXPECT_EQ(norms, 3 * 2 * u.d_model);  // ln_1, ln_2, ln_f: gain and shift
  EXPECT_EQ(umup.parameter_count() + norms, unit.parameter_count());
  for (autograd::Parameter* p : umup.parameters()) EXPECT_EQ(p->name.find("ln_"), std::string::npos) << p->name;
  // config.json says umup and reads back as such.
  const nn::GPTConfig back = nn::GPTConfig::from_json(m.to_json());
  EXPECT_TRUE(back.unit.enabled);
  EXPECT_TRUE(back.unit.umup);
  EXPECT_NE(m.to_json().find("\"parametrisation\": \"umup\""), std::string::npos) << m.to_json();
  EXPECT_EQ(u.to_json().find("umup"), std::string::npos);  // unit models' config.json unchanged
  nn::GPTConfig bad = m;
  bad.unit.enabled = false;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad = m;
  bad.unit.residual_mult = 0;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

TEST(UnitGPT, ConfigRoundTripsAndInitIsUnit) {
  nn::GPTConfig c = tiny_gpt("paper");
  c.unit.tau_attn = 0.2;
  c.unit.op_constraints["gelu"] = "gmean";
  const nn::GPTConfig back = nn::GPTConfig::from_json(c.to_json());
  EXPECT_TRUE(back.unit.enabled);
  EXPECT_EQ(back.unit.rule_set, "paper");
  EXPECT_DOUBLE_EQ(back.unit.tau_attn, 0.2);
  EXPECT_EQ(back.unit.op_constraints.at("gelu"), "gmean");
  EXPECT_FALSE(nn::GPTConfig::from_json(tiny_gpt("library").to_json()).unit.rule_set.empty());
  nn::GPTConfig bad = c;
  bad.unit.op_constraints["gelu"] = "median";
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  // Weights N(0, 1): the untied head exists and every matrix has std ~1.
  c.d_model = 64;
  c.heads = 4;
  nn::GPT m(c);
  ASSERT_NE(m.find("lm_head.weight"), nullptr);
  const auto w = m.find("transformer.h.0.mlp.c_fc.weight")->value.to_vector();
  double s = 0;
  for (float v : w) s += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(s / static_cast<double>(w.size())), 1.0, 0.02);
}

TEST(UnitMLP, GradientsAreScaledLossGradients) {
  nn::MLPConfig c;
  c.inputs = 12;
  c.hidden = {10, 9};
  c.classes = 5;
  c.activation = "gelu";
  c.seed = 2;
  c.unit.enabled = true;
  nn::MLP m(c);
  const int64_t B = 6;
  std::mt19937_64 g(1);
  std::normal_distribution<double> nd;
  nn::Batch batch{Tensor::empty({B, c.inputs}), Tensor::empty({B}, DType::i32)};
  for (int64_t i = 0; i < B * c.inputs; ++i) batch.inputs.f32()[i] = static_cast<float>(nd(g));
  for (int64_t i = 0; i < B; ++i)
    batch.targets.data<int32_t>()[i] = static_cast<int32_t>(i % c.classes);
  const us::Rules lin = c.unit.rules("linear");
  const us::LossScales ce = us::cross_entropy(c.classes, B);
  const us::Scales ro = us::linear_readout(9, c.classes, B, c.unit.rules("readout"));
  auto factor = [&](const autograd::Parameter& p) -> double {
    const bool last = p.name.rfind("layers.2.", 0) == 0;
    const double top = ce.bwd[0] * (last ? 1.0 : ro.bwd[0] / ro.fwd);
    if (last) return top * (p.value.ndim() == 2 ? ro.bwd[1] / ro.fwd : ro.bwd[2]);
    const int64_t fi = p.name.rfind("layers.0.", 0) == 0 ? 12 : 10,
                  fo = p.name.rfind("layers.0.", 0) == 0 ? 10 : 9;
    const us::Scales s = us::linear(fi, fo, B, lin);
    return top * (p.value.ndim() == 2 ? s.bwd[1] / s.fwd : s.bwd[2]);
  };
  check_against_fd(m, batch, factor, B);
}

// A tiny unit GPT trains through the whole session path (unit LR rules,
// independent weight decay, unit default learning rate).
TEST(UnitGPT, TrainsAndLossFalls) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("mantissa_unit_gpt_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "text.txt";
  {
    std::ofstream f(path);
    std::mt19937_64 g(4);
    const char* words[] = {"the ", "cat ", "sat ", "on ",  "a ",
                           "mat ", "and ", "dog ", "ran ", "far. "};
    for (int i = 0; i < 6000; ++i) f << words[g() % 10];
  }
  train::TrainConfig c;
  c.model = "gpt";
  c.layers = 2;
  c.d_model = 32;
  c.heads = 2;
  c.seq_len = 32;
  c.batch_size = 8;
  c.steps = 40;
  c.warmup = 5;
  c.eval_batches = 2;
  c.data = path.string();
  for (const char* recipe : {"unit-fp32", "umup-fp32"}) {
    SCOPED_TRACE(recipe);
    const bool umup = recipe == std::string("umup-fp32");
    c.recipe = recipe;
    auto s = train::build_session(c);
    EXPECT_DOUBLE_EQ(s->config.lr, umup ? train::kUmupDefaultLr : train::kUnitDefaultLr);
    EXPECT_EQ(static_cast<nn::GPT&>(*s->model).config().unit.umup, umup);
    // Adam rule: hidden weights lr x depth^-1/2 x fan_in^-1/2; the readout x1.
    // Biases: depth^-1/2 x the linear's forward scale fan_in^-1/2 (the library
    // scales the bias with the output; ours is added after the GEMM alpha).
    const auto params = s->model->parameters();
    int checked = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string& n = params[i]->name;
      double want = -1;
      if (n == "transformer.h.0.attn.c_attn.weight") want = 1.0 / std::sqrt(2.0) / std::sqrt(32.0);
      if (n == "transformer.h.1.attn.c_attn.bias") want = 1.0 / std::sqrt(2.0) / std::sqrt(32.0);
      if (n == "transformer.h.0.mlp.c_proj.bias")
        want = 1.0 / std::sqrt(2.0) / std::sqrt(128.0);                   // fan_in 4C
      if (n == "transformer.h.0.ln_1.bias") want = 1.0 / std::sqrt(2.0);  // norms: depth only
      if (n == "transformer.wte.weight") want = 1.0 / std::sqrt(32.0);    // fan_in = width
      if (n == "lm_head.weight") want = 1.0;
      if (want < 0) continue;
      EXPECT_DOUBLE_EQ(s->optimizer->lr_multiplier(i), want) << n;
      ++checked;
    }
    EXPECT_EQ(checked, umup ? 5 : 6);  // u-muP has no ln_1.bias
    double first = 0, last = 0;
    for (int64_t k = 0; k < c.steps; ++k) {
      const double l = s->trainer->train_step().loss;
      ASSERT_TRUE(std::isfinite(l));
      if (k == 0) first = l;
      last = l;
    }
    EXPECT_NEAR(first, std::log(256.0), 0.2);  // unit logits at init are near uniform
    EXPECT_LT(last, first - 1.5) << "first " << first << " last " << last;
  }
  c.recipe = "umup-fp32";
  c.model = "llama";
  EXPECT_THROW(train::build_session(c), std::invalid_argument);  // u-muP: GPT only
  std::filesystem::remove_all(dir);
}
