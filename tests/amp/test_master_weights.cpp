// Master weights and working-format rounding: updates below half an ulp are
// lost without a master and kept with one; stochastic rounding is unbiased
// and reproducible from (seed, step); norms stay fp32 under O2.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <iterator>
#include <limits>
#include <vector>

#include "mantissa/amp/master_weights.hpp"
#include "mantissa/recipe/recipe.hpp"
#include "mantissa/formats/round.hpp"

using namespace mantissa;
using namespace mantissa::amp;
using namespace mantissa::recipe;

namespace {

autograd::Parameter make_param(const std::string& name, int64_t n, float v) {
  autograd::Parameter p;
  p.name = name;
  p.value = Tensor::empty({n}, DType::f32, MemoryKind::parameter);
  p.value.fill(v);
  p.grad = Tensor::zeros({n}, DType::f32, MemoryKind::gradient);
  return p;
}

// fp16 nearest-even for x in [1, 2): the grid is k x 2^-10 (independent of the formats module).
double fp16_nearest_in_1_2(double x) { return std::nearbyint(x * 1024.0) / 1024.0; }

// One fake optimizer update of +delta on every element.
void update(MasterWeights& mw, autograd::Parameter& p, float delta, int64_t step) {
  mw.before_update();
  for (int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] += delta;
  mw.after_update(step);
}

}  // namespace

TEST(MasterWeights, PureFp16LosesSmallUpdatesMasterKeepsThem) {
  autograd::Parameter pure = make_param("w", 4, 1.0f), mixed = make_param("w", 4, 1.0f);
  MasterWeights no_master({&pure}, find_recipe("fp16-pure"), 1);
  MasterWeights with_master({&mixed}, find_recipe("fp16-master"), 1);
  EXPECT_FALSE(no_master.has_master());
  EXPECT_TRUE(with_master.has_master());
  no_master.initialise();
  with_master.initialise();
  const float delta = 1e-4f;  // below half an fp16 ulp at 1 (2^-11 = 4.9e-4)
  double master_ref = 1.0;
  for (int s = 0; s < 10; ++s) {
    update(no_master, pure, delta, s);
    update(with_master, mixed, delta, s);
    master_ref = static_cast<float>(static_cast<float>(master_ref) + delta);
  }
  EXPECT_EQ(pure.value.f32()[0], 1.0f);  // every update lost
  EXPECT_EQ(with_master.masters().at("w")[0], static_cast<float>(master_ref));
  EXPECT_EQ(mixed.value.f32()[0], fp16_nearest_in_1_2(master_ref));
  EXPECT_EQ(mixed.value.f32()[0], 1.0f + 1.0f / 1024);
  EXPECT_GT(mixed.version, 0);
}

TEST(MasterWeights, StochasticRoundingIsUnbiasedAndReproducible) {
  const int64_t n = 20000;
  const float quarter = 0.25f / 1024;  // a quarter of an fp16 ulp at 1
  Recipe r = find_recipe("fp16-master");
  r.weight_rounding = WeightRounding::stochastic;
  autograd::Parameter a = make_param("w", n, 1.0f), b = make_param("w", n, 1.0f), c = make_param("w", n, 1.0f);
  MasterWeights ma({&a}, r, 42), mb({&b}, r, 42), mc({&c}, r, 42);
  ma.initialise();
  mb.initialise();
  mc.initialise();
  update(ma, a, quarter, 7);
  update(mb, b, quarter, 7);
  update(mc, c, quarter, 8);  // another step: another stream
  int64_t up = 0, differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = a.value.f32()[i];
    ASSERT_TRUE(v == 1.0f || v == 1.0f + 1.0f / 1024) << v;
    up += v != 1.0f;
    ASSERT_EQ(v, b.value.f32()[i]);
    differ += v != c.value.f32()[i];
  }
  const double p = static_cast<double>(up) / n, sigma = std::sqrt(0.25 * 0.75 / n);
  EXPECT_NEAR(p, 0.25, 6 * sigma);
  EXPECT_GT(differ, n / 10);
}

// Nearest rounding into fp16 saturates finite overflow and inf to +-65504
// and keeps NaN, as the scalar reference encoder with saturation does, on
// an array long enough to be rounded in parallel blocks.
TEST(MasterWeights, NearestRoundingSaturatesAsTheReference) {
  const int64_t n = 300007;
  autograd::Parameter w = make_param("w", n, 0.0f);
  float* v = w.value.f32();
  for (int64_t i = 0; i < n; ++i) v[i] = std::ldexp(std::sin(0.37f * static_cast<float>(i)), static_cast<int>(i % 45) - 27);
  const float specials[] = {65504.0f, 65519.99f, 65520.0f, -70000.0f, 1e30f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), -0.0f,
                            1e-8f, 3e-8f, std::numeric_limits<float>::denorm_min()};
  for (size_t k = 0; k < std::size(specials); ++k) v[static_cast<int64_t>(k) * 20011] = specials[k];
  const std::vector<float> in(v, v + n);
  MasterWeights mw({&w}, find_recipe("scalify-fp8"), 0);  // fp16 weights, rounded in place
  ASSERT_FALSE(mw.has_master());
  mw.initialise();
  const formats::Format& f16 = formats::preset("fp16");
  formats::RoundOptions sat;
  sat.saturate = true;
  for (int64_t i = 0; i < n; ++i) {
    const float want = formats::decode_f32(f16, formats::encode(f16, in[static_cast<size_t>(i)], sat));
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(v[i])) << i;
    else ASSERT_EQ(std::bit_cast<uint32_t>(v[i]), std::bit_cast<uint32_t>(want)) << i << " input " << in[static_cast<size_t>(i)];
  }
  EXPECT_EQ(v[5 * 20011], 65504.0f);  // inf saturates
  EXPECT_EQ(v[3 * 20011], -65504.0f);
}

TEST(MasterWeights, O2KeepsNormsInFp32AndFp32IsANoOp) {
  autograd::Parameter ln = make_param("transformer.h.0.ln_1.weight", 3, 1.0001f);
  ln.role = autograd::Role::norm_gain;
  autograd::Parameter w = make_param("transformer.h.0.mlp.c_fc.weight", 3, 1.0001f);
  MasterWeights o2({&ln, &w}, recipe_for_opt_level("O2"), 0);
  o2.initialise();
  EXPECT_EQ(ln.value.f32()[0], 1.0001f);
  EXPECT_EQ(w.value.f32()[0], 1.0f);  // 1.0001 rounds to 1 in fp16
  EXPECT_EQ(o2.masters().count("transformer.h.0.ln_1.weight"), 0u);

  autograd::Parameter x = make_param("x", 2, 1.0001f);
  MasterWeights fp32({&x}, find_recipe("fp32"), 0);
  EXPECT_FALSE(fp32.active());
  fp32.initialise();
  update(fp32, x, 1e-7f, 0);
  EXPECT_EQ(x.value.f32()[0], 1.0001f + 1e-7f);
}

TEST(MasterWeights, LoadMasterChecksNamesAndSizes) {
  autograd::Parameter w = make_param("w", 3, 1.0f);
  MasterWeights m({&w}, find_recipe("bf16-master-sr"), 0);
  m.initialise();
  const float saved[3] = {1.5f, 2.0f, 3.0f};
  m.load_master("w", saved, 3);
  EXPECT_EQ(m.masters().at("w")[2], 3.0f);
  EXPECT_THROW(m.load_master("w", saved, 2), std::invalid_argument);
  EXPECT_THROW(m.load_master("v", saved, 3), std::invalid_argument);
}
