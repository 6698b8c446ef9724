// Underflow/overflow diagnostics against hand-placed values around fp16's
// and e4m3fn's range limits.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "mantissa/amp/grad_stats.hpp"

using namespace mantissa;
using namespace mantissa::amp;

TEST(GradStats, ClassifiesAgainstFp16Limits) {
  const auto& f16 = formats::preset("fp16");
  const float inf = std::numeric_limits<float>::infinity();
  // fp16: min subnormal 2^-24, min normal 2^-14, max 65504.
  const std::vector<float> g = {0.0f, -0.0f,                                    // zero
                                std::ldexp(1.0f, -25), -std::ldexp(1.5f, -26),  // flushed
                                std::ldexp(1.0f, -24), -std::ldexp(1.9f, -15),  // subnormal
                                std::ldexp(1.0f, -14), 1.0f, 65504.0f,          // normal
                                65600.0f, -inf, std::numeric_limits<float>::quiet_NaN()};  // overflow
  const GradRangeCounts c = classify(f16, g.data(), static_cast<int64_t>(g.size()));
  EXPECT_EQ(c.total, 12);
  EXPECT_EQ(c.zero, 2);
  EXPECT_EQ(c.flushed, 2);
  EXPECT_EQ(c.subnormal, 2);
  EXPECT_EQ(c.overflow, 3);
}

TEST(GradStats, E4m3fnRange) {
  const auto& f8 = formats::preset("e4m3fn");  // min subnormal 2^-9, min normal 2^-6, max 448
  const std::vector<float> g = {std::ldexp(1.0f, -10), std::ldexp(1.0f, -9), std::ldexp(1.0f, -6), 448.0f, 449.0f};
  const GradRangeCounts c = classify(f8, g.data(), 5);
  EXPECT_EQ(c.flushed, 1);
  EXPECT_EQ(c.subnormal, 1);
  EXPECT_EQ(c.overflow, 1);
  EXPECT_EQ(c.zero, 0);
}

TEST(GradStats, GroupsMergeLayersAndReportFractions) {
  EXPECT_EQ(grad_group_name("transformer.h.12.mlp.c_fc.weight"), "mlp.c_fc.weight");
  EXPECT_EQ(grad_group_name("transformer.wte.weight"), "wte.weight");
  EXPECT_EQ(grad_group_name("layers.0.weight"), "layers.0.weight");
  autograd::Parameter a, b, c;
  a.name = "transformer.h.0.attn.c_proj.weight";
  b.name = "transformer.h.1.attn.c_proj.weight";
  c.name = "transformer.wpe.weight";
  a.grad = Tensor::from({0.0f, 1.0f}, {2}, MemoryKind::gradient);
  b.grad = Tensor::from({1e-9f, 1.0f}, {2}, MemoryKind::gradient);
  c.grad = Tensor::from({1e6f, 1.0f, 1.0f, 1.0f}, {4}, MemoryKind::gradient);
  const auto& f16 = formats::preset("fp16");
  const auto stats = gradient_range_stats(f16, {&a, &b, &c});
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].group, "attn.c_proj.weight");
  EXPECT_EQ(stats[0].counts.total, 4);
  EXPECT_EQ(stats[2].group, "all");
  EXPECT_EQ(stats[2].counts.total, 8);
  const auto j = nlohmann::json::parse(grad_stats_json(f16, stats));
  EXPECT_EQ(j["format"], "fp16");
  EXPECT_DOUBLE_EQ(j["groups"]["attn.c_proj.weight"]["zero"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["groups"]["attn.c_proj.weight"]["flushed"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["groups"]["wpe.weight"]["overflow"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["groups"]["all"]["overflow"].get<double>(), 0.125);
}
