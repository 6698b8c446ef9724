// Scale plot built from recorders: ops merged in model order, one series per
// (model, pass), values are the chosen statistic and land on the log2 axis
// where the frame says.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "mantissa/report/scales.hpp"

namespace rp = mantissa::report;
namespace us = mantissa::unit;

TEST(ScalePlotFromRecorders, MergesOpsAndPlacesValues) {
  us::ScaleRecorder standard, unit;
  const std::vector<float> one{1, -1, 1, -1}, quarter{0.25f, -0.25f}, four{4, -4, 4};
  standard.record("embed", us::Pass::forward, quarter.data(), quarter.size());
  standard.record("mlp", us::Pass::forward, four.data(), four.size());
  standard.record("mlp", us::Pass::backward, quarter.data(), quarter.size());
  unit.record("embed", us::Pass::forward, one.data(), one.size());
  unit.record("mlp", us::Pass::forward, one.data(), one.size());
  unit.record("extra", us::Pass::forward, one.data(), one.size());
  const rp::LinePlot p = rp::scale_plot({{"standard", &standard}, {"unit", &unit}}, "at init");
  ASSERT_EQ(p.x.categories, (std::vector<std::string>{"embed", "mlp", "extra"}));
  // unit has no backward rows: three series, not four.
  ASSERT_EQ(p.series.size(), 3u);
  EXPECT_EQ(p.series[0].name, "standard forward");
  EXPECT_EQ(p.series[1].name, "standard backward");
  EXPECT_TRUE(p.series[1].dashed);
  EXPECT_EQ(p.series[2].name, "unit forward");
  EXPECT_DOUBLE_EQ(p.series[0].y[0], 0.25);  // RMS of +-0.25
  EXPECT_DOUBLE_EQ(p.series[0].y[1], 4.0);
  EXPECT_TRUE(std::isnan(p.series[0].y[2]));  // standard has no "extra"
  EXPECT_TRUE(std::isnan(p.series[1].y[0]));
  EXPECT_EQ(p.y.label, "RMS (log2)");
  // Range 2^-2 .. 2^2: RMS 1 sits half-way down the frame.
  const rp::Layout l = rp::layout(p);
  EXPECT_NEAR(l.y(1.0), l.top + l.height / 2, 1e-9);
  const std::string svg = rp::render(p);
  char circle[96];
  std::snprintf(circle, sizeof circle, "<circle cx=\"%.2f\" cy=\"%.2f\"", l.x(2.0), l.y(1.0));
  EXPECT_NE(svg.find(circle), std::string::npos);
  EXPECT_THROW(rp::scale_plot({}, "none"), std::invalid_argument);
  EXPECT_THROW(rp::scale_plot({{"x", nullptr}}, "null"), std::invalid_argument);
  const rp::LinePlot m = rp::scale_plot({{"standard", &standard}}, "max", rp::ScaleStatistic::max_abs);
  EXPECT_DOUBLE_EQ(m.series[0].y[1], 4.0);
  EXPECT_EQ(m.y.label, "max |x| (log2)");
}
