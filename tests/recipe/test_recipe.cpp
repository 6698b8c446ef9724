// The recipe registry: the built-ins carry the settings of their sources
// (apex opt levels, autocast, GradScaler), overrides and JSON round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "mantissa/amp/amp.hpp"
#include "mantissa/recipe/recipe.hpp"
#include "mantissa/nn/gpt.hpp"
#include "mantissa/quant/fp8.hpp"

using namespace mantissa;
using namespace mantissa::recipe;
using namespace mantissa::amp;
using namespace mantissa::quant;

TEST(Recipe, BuiltinsHaveTheDocumentedSettings) {
  for (const char* name : {"fp32", "bf16-amp", "fp16-amp", "fp16-amp-noscale", "fp16-pure", "bf16-pure"})
    EXPECT_NO_THROW(find_recipe(name)) << name;
  const Recipe fp32 = find_recipe("fp32");
  EXPECT_EQ(fp32.matmul_format, "fp32");
  EXPECT_EQ(fp32.weight_format, "fp32");
  EXPECT_EQ(fp32.loss_scale.method, ScalingMethod::none);

  const Recipe bf = find_recipe("bf16-amp");
  EXPECT_EQ(bf.matmul_format, "bf16");
  EXPECT_EQ(bf.saved_format, "bf16");
  EXPECT_EQ(bf.weight_format, "fp32");
  EXPECT_EQ(bf.loss_scale.method, ScalingMethod::none);

  const Recipe f16 = find_recipe("fp16-amp");
  EXPECT_EQ(f16.matmul_format, "fp16");
  EXPECT_EQ(f16.loss_scale.method, ScalingMethod::dynamic);
  EXPECT_EQ(f16.loss_scale.init_scale, 65536.0);
  EXPECT_EQ(f16.loss_scale.growth_factor, 2.0);
  EXPECT_EQ(f16.loss_scale.backoff_factor, 0.5);
  EXPECT_EQ(f16.loss_scale.growth_interval, 2000);

  EXPECT_EQ(find_recipe("fp16-amp-noscale").loss_scale.method, ScalingMethod::none);

  const Recipe pure = find_recipe("fp16-pure");
  EXPECT_EQ(pure.weight_format, "fp16");
  EXPECT_EQ(pure.gradient_format, "fp16");
  EXPECT_EQ(pure.master_format, "none");
  EXPECT_EQ(pure.loss_scale.method, ScalingMethod::none);
  EXPECT_EQ(find_recipe("bf16-pure").weight_format, "bf16");
  EXPECT_EQ(find_recipe("bf16-pure").master_format, "none");
}

TEST(Recipe, OptLevelsFollowApex) {
  // apex's opt-level table: weights, casting, norms fp32, master, loss scale.
  const Recipe o0 = recipe_for_opt_level("O0");
  EXPECT_EQ(o0.matmul_format, "fp32");
  EXPECT_EQ(o0.loss_scale.method, ScalingMethod::none);
  const Recipe o1 = recipe_for_opt_level("O1");
  EXPECT_EQ(o1.weight_format, "fp32");
  EXPECT_EQ(o1.matmul_format, "fp16");
  EXPECT_EQ(o1.loss_scale.method, ScalingMethod::dynamic);
  const Recipe o2 = recipe_for_opt_level("O2");
  EXPECT_EQ(o2.weight_format, "fp16");
  EXPECT_EQ(o2.master_format, "fp32");
  EXPECT_TRUE(o2.norms_fp32);
  EXPECT_EQ(o2.loss_scale.method, ScalingMethod::dynamic);
  const Recipe o3 = recipe_for_opt_level("O3");
  EXPECT_EQ(o3.weight_format, "fp16");
  EXPECT_EQ(o3.master_format, "none");
  EXPECT_FALSE(o3.norms_fp32);
  EXPECT_EQ(o3.loss_scale.method, ScalingMethod::none);
  EXPECT_THROW(recipe_for_opt_level("O4"), std::invalid_argument);
}

TEST(Recipe, UnknownNamesAndSettingsAreNamed) {
  try {
    find_recipe("fp17");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp17"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bf16-amp"), std::string::npos);
  }
  Recipe r = find_recipe("fp32");
  EXPECT_THROW(set_recipe_field(r, "colour", "red"), std::invalid_argument);
  EXPECT_THROW(set_recipe_field(r, "matmul_format", "fp7"), std::invalid_argument);
  EXPECT_THROW(set_recipe_field(r, "loss_scale.init_scale", "big"), std::invalid_argument);
  EXPECT_THROW(set_recipe_field(r, "weight_rounding", "sideways"), std::invalid_argument);
  set_recipe_field(r, "weight_rounding", "stochastic");
  set_recipe_field(r, "loss_scale.method", "static");
  set_recipe_field(r, "loss_scale.init_scale", "1024");
  EXPECT_EQ(r.weight_rounding, WeightRounding::stochastic);
  EXPECT_EQ(r.loss_scale.method, ScalingMethod::static_scale);
  EXPECT_EQ(r.loss_scale.init_scale, 1024.0);
}

TEST(Recipe, JsonRoundTripsEverySetting) {
  for (const Recipe& r : recipes()) {
    const std::string j = recipe_to_json(r);
    const Recipe back = recipe_from_json(j);
    EXPECT_EQ(recipe_to_json(back), j) << r.name;
    const auto parsed = nlohmann::json::parse(j);
    for (const char* key : {"name", "parametrisation", "matmul_format", "saved_format", "gradient_format",
                            "weight_format", "master_format", "optimizer_state_format", "weight_rounding",
                            "cast_forward", "cast_backward", "cast_scaling", "amax_history", "cast_margin",
                            "loss_scale"})
      EXPECT_TRUE(parsed.contains(key)) << r.name << " lacks " << key;
  }
}

TEST(Recipe, RegistryIsOpenForLaterRecipes) {
  Recipe r = find_recipe("bf16-amp");
  r.name = "test-bf16-static";
  r.loss_scale.method = ScalingMethod::static_scale;
  r.loss_scale.init_scale = 128;
  register_recipe(r);
  EXPECT_EQ(find_recipe("test-bf16-static").loss_scale.init_scale, 128.0);
  EXPECT_NE(recipe_names().find("test-bf16-static"), std::string::npos);
  Recipe bad = r;
  bad.name = "test-bad";
  bad.weight_format = "fp99";
  EXPECT_THROW(register_recipe(bad), std::invalid_argument);
}

TEST(Recipe, PrecisionPolicyMapsFormats) {
  auto p = precision_policy(find_recipe("bf16-amp"));
  EXPECT_EQ(p.matmul, DType::bf16);
  EXPECT_EQ(p.saved, DType::bf16);
  p = precision_policy(find_recipe("fp32"));
  EXPECT_EQ(p.matmul, DType::f32);
  Recipe odd = find_recipe("fp32");
  odd.matmul_format = "e3m4";
  EXPECT_THROW(precision_policy(odd), std::invalid_argument);
}

// The casts each low-precision recipe puts at the matrix products, and how
// it scales them (unit scaling, Transformer Engine, OCP MX, DeepSeek-V3).
TEST(Recipe, CastRecipesHaveTheDocumentedSettings) {
  struct Want {
    const char* name;
    Parametrisation param;
    const char* fwd;
    const char* bwd;
    CastScaling scaling;
  };
  const Want wants[] = {
      {"fp8-noscale", Parametrisation::standard, "e4m3fn", "e5m2", CastScaling::unit},
      {"fp8-current", Parametrisation::standard, "e4m3fn", "e5m2", CastScaling::current},
      {"fp8-delayed", Parametrisation::standard, "e4m3fn", "e5m2", CastScaling::delayed},
      {"mxfp8", Parametrisation::standard, "e4m3fn", "e5m2", CastScaling::mx},
      {"fp8-blockwise", Parametrisation::standard, "e4m3fn", "e4m3fn", CastScaling::blockwise},
      {"unit-fp32", Parametrisation::unit, "", "", CastScaling::unit},
      {"unit-bf16", Parametrisation::unit, "", "", CastScaling::unit},
      {"unit-fp16", Parametrisation::unit, "", "", CastScaling::unit},
      {"unit-fp8", Parametrisation::unit, "e4m3fn", "e5m2", CastScaling::unit},
      {"scalify-fp16", Parametrisation::standard, "fp16", "fp16", CastScaling::propagate},
      {"scalify-fp16-master", Parametrisation::standard, "fp16", "fp16", CastScaling::propagate},
      {"scalify-fp8", Parametrisation::standard, "e4m3fn", "e5m2", CastScaling::propagate},
      {"scalify-fp8-fp16state", Parametrisation::standard, "e4m3fn", "e5m2", CastScaling::propagate},
  };
  for (const Want& w : wants) {
    const Recipe r = find_recipe(w.name);
    EXPECT_EQ(r.parametrisation, w.param) << w.name;
    EXPECT_EQ(r.cast_forward, w.fwd) << w.name;
    EXPECT_EQ(r.cast_backward, w.bwd) << w.name;
    EXPECT_EQ(r.cast_scaling, w.scaling) << w.name;
    // Unit scaling, FP8 scaling and scale propagation all replace loss scaling.
    EXPECT_EQ(r.loss_scale.method, ScalingMethod::none) << w.name;
  }
  const Recipe delayed = find_recipe("fp8-delayed");
  EXPECT_EQ(delayed.amax_history, 1024);  // Transformer Engine defaults
  EXPECT_EQ(delayed.cast_margin, 0.0);
  EXPECT_EQ(delayed.matmul_format, "bf16");
  const Recipe u16 = find_recipe("unit-fp16");
  EXPECT_EQ(u16.matmul_format, "fp16");
  EXPECT_EQ(u16.weight_format, "fp16");
  EXPECT_EQ(u16.master_format, "fp32");
  EXPECT_EQ(find_recipe("scalify-fp8").master_format, "fp16");
  // Scalify's table: FP16 products and gradients on fp32 weights, then FP16 master weights.
  EXPECT_EQ(find_recipe("scalify-fp16").weight_format, "fp32");
  EXPECT_EQ(find_recipe("scalify-fp16").gradient_format, "fp16");
  EXPECT_EQ(find_recipe("scalify-fp16-master").weight_format, "fp16");
  EXPECT_EQ(find_recipe("scalify-fp16-master").master_format, "fp16");
  EXPECT_EQ(find_recipe("scalify-fp8-fp16state").optimizer_state_format, "fp16");
}

TEST(Recipe, CastSettingsAreCheckedAndNamed) {
  Recipe r = find_recipe("fp8-delayed");
  set_recipe_field(r, "cast_forward", "e4m3fnuz");
  set_recipe_field(r, "cast_backward", "e5m2fnuz");
  set_recipe_field(r, "cast_scaling", "current");
  set_recipe_field(r, "amax_history", "16");
  set_recipe_field(r, "cast_margin", "1");
  EXPECT_NO_THROW(validate_recipe(r));
  EXPECT_EQ(r.cast_forward, "e4m3fnuz");
  EXPECT_EQ(r.cast_scaling, CastScaling::current);
  EXPECT_EQ(r.amax_history, 16);
  EXPECT_EQ(r.cast_margin, 1.0);
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no exception)");
  };
  EXPECT_NE(message([&] { set_recipe_field(r, "cast_scaling", "sideways"); }).find("cast_scaling"), std::string::npos);
  EXPECT_NE(message([&] { set_recipe_field(r, "cast_forward", "fp7"); }).find("cast_forward"), std::string::npos);
  EXPECT_NE(message([&] { set_recipe_field(r, "amax_history", "0"); }).find("amax_history"), std::string::npos);
  EXPECT_NE(message([&] { set_recipe_field(r, "cast_margin", "0.5"); }).find("cast_margin"), std::string::npos);
  // A 16-bit cast is only for scale propagation; the 1-byte path needs a format exact in bf16.
  Recipe wide = r;
  wide.cast_forward = "fp16";
  EXPECT_NE(message([&] { validate_recipe(wide); }).find("cast_forward"), std::string::npos);
  wide.cast_scaling = CastScaling::propagate;
  EXPECT_NO_THROW(validate_recipe(wide));
  Recipe empty = r;
  empty.cast_forward = empty.cast_backward = "";
  EXPECT_NE(message([&] { validate_recipe(empty); }).find("cast_scaling"), std::string::npos);
}

TEST(Recipe, ScalePropagationNeedsItsQuantiser) {
  // Its scales start from the model's parameters: without a model it cannot be built.
  EXPECT_THROW(precision_policy(find_recipe("scalify-fp8")), std::invalid_argument);
  nn::GPTConfig c;
  c.layers = 1;
  c.d_model = 16;
  c.heads = 2;
  c.context = 8;
  nn::GPT model(c);
  for (const char* name : {"scalify-fp8", "scalify-fp16", "scalify-fp16-master"}) {
    const autograd::PrecisionPolicy p = precision_policy(find_recipe(name), &model);
    ASSERT_NE(p.quantiser, nullptr) << name;
    EXPECT_TRUE(p.quantiser->casts_forward()) << name;
    EXPECT_TRUE(p.quantiser->casts_backward()) << name;
  }
}

// cast_readout: unit-fp8 and fp8-noscale leave the readout (LM head) uncast,
// so one training step casts three tensors fewer (the head's input, its
// weight, the logits' gradient) than the same recipe with the readout cast;
// the other FP8 recipes cast it. The setting parses and round-trips.
TEST(Recipe, CastReadoutLeavesTheHeadUncast) {
  EXPECT_FALSE(find_recipe("unit-fp8").cast_readout);
  EXPECT_FALSE(find_recipe("fp8-noscale").cast_readout);
  EXPECT_TRUE(find_recipe("fp8-current").cast_readout);
  EXPECT_TRUE(find_recipe("scalify-fp8").cast_readout);
  Recipe r = find_recipe("unit-fp8");
  set_recipe_field(r, "cast_readout", "true");
  EXPECT_TRUE(r.cast_readout);
  EXPECT_TRUE(recipe_from_json(recipe_to_json(r)).cast_readout);
  EXPECT_THROW(set_recipe_field(r, "cast_readout", "maybe"), std::invalid_argument);

  const auto casts_of = [](const Recipe& recipe, bool unit) {
    nn::GPTConfig c;
    c.vocab = 32;
    c.context = 8;
    c.layers = 2;
    c.d_model = 16;
    c.heads = 2;
    c.unit.enabled = unit;
    nn::GPT m(c);
    const autograd::PrecisionPolicy p = precision_policy(recipe, &m);
    m.set_precision(p);
    nn::Batch b{Tensor::empty({2, 8}, DType::i32), Tensor::empty({2, 8}, DType::i32)};
    for (int i = 0; i < 16; ++i) {
      b.inputs.data<int32_t>()[i] = (i * 7) % 32;
      b.targets.data<int32_t>()[i] = (i * 5 + 1) % 32;
    }
    m.zero_grad();
    const nn::LossSum l = m.forward_backward(b, 1.0f);
    EXPECT_TRUE(std::isfinite(l.sum));
    return dynamic_cast<const quant::Fp8Quantiser&>(*p.quantiser).stats().casts;
  };
  for (const char* name : {"unit-fp8", "fp8-noscale"}) {
    const Recipe uncast = find_recipe(name);
    Recipe cast = uncast;
    cast.cast_readout = true;
    const bool unit = uncast.parametrisation == Parametrisation::unit;
    const int64_t without = casts_of(uncast, unit), with = casts_of(cast, unit);
    EXPECT_EQ(with - without, 3) << name;
    EXPECT_EQ(without, 2 * 4 * 3) << name;  // 2 blocks x 4 linears x (input, weight, output gradient)
  }
}
