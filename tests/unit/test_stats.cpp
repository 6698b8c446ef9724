// Tensor statistics and the scale recorder: moments against long-double
// recomputation, format shares against the reference rounding module
// (formats/round.hpp: a value underflows iff it encodes to zero), the CSV
// and the table.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/unit/stats.hpp"

namespace us = mantissa::unit;
namespace fm = mantissa::formats;

TEST(TensorStats, SmallExactValues) {
  const std::vector<float> x{3.0f, -4.0f, 0.0f, 0.5f};
  const us::TensorStats s = us::stats(x.data(), x.size());
  EXPECT_EQ(s.n, 4);
  EXPECT_DOUBLE_EQ(s.mean, -0.5 / 4);
  EXPECT_DOUBLE_EQ(s.rms, std::sqrt((9 + 16 + 0.25) / 4));
  EXPECT_DOUBLE_EQ(s.mean_abs, 7.5 / 4);
  EXPECT_EQ(s.max_abs, 4.0);
  EXPECT_EQ(s.min_abs, 0.5);
  EXPECT_DOUBLE_EQ(s.zero, 0.25);
  const double m = -0.125;
  const double var = ((3 - m) * (3 - m) + (-4 - m) * (-4 - m) + m * m + (0.5 - m) * (0.5 - m)) / 4;
  EXPECT_NEAR(s.std, std::sqrt(var), 1e-15);
  // No format: no shares.
  EXPECT_EQ(s.underflow + s.subnormal + s.overflow, 0.0);
  // All zeros: min_abs 0, nothing divides by zero.
  const std::vector<float> z(10, 0.0f);
  EXPECT_EQ(us::stats(z.data(), z.size()).min_abs, 0.0);
  EXPECT_EQ(us::stats(z.data(), 0).n, 0);
}

TEST(TensorStats, LargeParallelMatchesLongDouble) {
  // > 64 Ki values takes the OpenMP path; a large mean checks the centred std.
  std::mt19937_64 rng(5);
  std::normal_distribution<float> d(1000.0f, 0.25f);
  std::vector<float> x(300000);
  for (float& v : x) v = d(rng);
  const us::TensorStats s = us::stats(x.data(), x.size());
  long double sum = 0, sq = 0, ab = 0;
  for (float v : x) {
    sum += v;
    sq += static_cast<long double>(v) * v;
    ab += std::fabs(v);
  }
  const long double n = x.size(), mean = sum / n;
  long double c = 0;
  for (float v : x) c += (v - mean) * (v - mean);
  EXPECT_NEAR(s.mean, static_cast<double>(mean), 1e-9);
  EXPECT_NEAR(s.rms, std::sqrt(static_cast<double>(sq / n)), 1e-9);
  EXPECT_NEAR(s.mean_abs, static_cast<double>(ab / n), 1e-9);
  EXPECT_NEAR(s.std, std::sqrt(static_cast<double>(c / n)), 1e-9);
  EXPECT_NEAR(s.std, 0.25, 0.01);
}

TEST(TensorStats, FormatSharesAgreeWithReferenceRounding) {
  // Log-uniform magnitudes from 2^-30 to 2^20 cover every region of fp16,
  // e5m2, e4m3fn and bf16 (bf16: all normal, no overflow).
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> e(-30.0, 20.0);
  std::vector<float> x(50000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i % 2 ? -1 : 1) * std::exp2(e(rng)));
  // Exact thresholds too: fp16 half-min-subnormal ties to 0, the tie below
  // min_normal rounds up to it, max is not an overflow.
  x.insert(x.end(), {0x1p-25f, 0x1.000002p-25f, 0x1p-14f - 0x1p-25f, 0x1p-14f, 65504.0f, 65520.0f});
  for (const char* name : {"fp16", "e5m2", "e4m3fn", "bf16", "e4m3fnuz"}) {
    const fm::Format& f = fm::preset(name);
    int64_t under = 0, sub = 0, over = 0;
    for (float v : x) {
      if (std::fabs(v) > f.max()) {
        ++over;
        continue;
      }
      const double r = fm::decode(f, fm::encode(f, v, {fm::Round::nearest_even, true}));
      if (r == 0) ++under;
      else if (std::fabs(r) < f.min_normal()) ++sub;
    }
    const us::TensorStats s = us::stats(x.data(), x.size(), &f);
    const double n = static_cast<double>(x.size());
    EXPECT_DOUBLE_EQ(s.underflow, under / n) << name;
    EXPECT_DOUBLE_EQ(s.subnormal, sub / n) << name;
    EXPECT_DOUBLE_EQ(s.overflow, over / n) << name;
    if (std::string(name) != "bf16") {
      EXPECT_GT(under, 0) << name;
    }
  }
}

TEST(TensorStats, NonFiniteValues) {
  const std::vector<float> x{1.0f, NAN, INFINITY, -2.0f};
  const us::TensorStats s = us::stats(x.data(), x.size(), &fm::preset("fp16"));
  EXPECT_DOUBLE_EQ(s.nan, 0.25);
  EXPECT_DOUBLE_EQ(s.overflow, 0.25);  // inf overflows; NaN is counted apart
  EXPECT_TRUE(std::isinf(s.max_abs));
  EXPECT_EQ(s.min_abs, 1.0);
}

TEST(ExponentHistogram, BinsAndClamping) {
  const std::vector<float> x{1.0f, 1.5f, 2.0f, 0.25f, 0.0f, INFINITY, 1e-30f, 1e30f, 0x1p-140f};
  const us::ExponentHistogram h = us::exponent_histogram(x.data(), x.size(), -4, 4);
  ASSERT_EQ(h.counts.size(), 9u);
  EXPECT_EQ(h.counts[0 + 4], 2);  // 1, 1.5
  EXPECT_EQ(h.counts[1 + 4], 1);  // 2
  EXPECT_EQ(h.counts[-2 + 4], 1);  // 0.25
  EXPECT_EQ(h.counts[0], 2);      // 1e-30 and a subnormal clamp to -4
  EXPECT_EQ(h.counts[8], 1);      // 1e30 clamps to 4
  EXPECT_EQ(h.zeros, 1);
  EXPECT_EQ(h.nonfinite, 1);
  EXPECT_THROW(us::exponent_histogram(x.data(), x.size(), 3, 2), std::invalid_argument);
}

TEST(ScaleRecorder, ModelOrderCsvAndTable) {
  us::ScaleRecorder rec(fm::preset("e4m3fn"), fm::preset("e5m2"));
  const std::vector<float> a{1, -1, 1, -1}, b{0.0002f, 0.0004f}, tiny{1e-7f, 1e-6f};
  rec.record("embed", us::Pass::forward, a.data(), a.size());
  rec.record("attn", us::Pass::forward, b.data(), b.size());
  rec.record("attn", us::Pass::backward, tiny.data(), tiny.size());
  rec.record("embed", us::Pass::backward, a.data(), a.size());
  const auto rows = rec.model_order();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].op, "embed");
  EXPECT_EQ(rows[1].op, "attn");
  EXPECT_EQ(rows[2].op, "embed");
  EXPECT_EQ(rows[2].pass, us::Pass::backward);
  // e4m3fn (forward): 0.0002 and 0.0004 are below 2^-10 (half its min subnormal 2^-9): both underflow.
  EXPECT_DOUBLE_EQ(rows[1].stats.underflow, 1.0);
  // e5m2 (backward): 1e-7, 1e-6 are below 2^-17: underflow too.
  EXPECT_DOUBLE_EQ(rows[3].stats.underflow, 1.0);
  const std::string csv = rec.csv();
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "op,pass,rms,std,mean_abs,max_abs,min_abs,underflow,subnormal,overflow");
  std::getline(in, line);
  EXPECT_EQ(line, "embed,forward,1,1,1,1,1,0,0,0");
  int lines = 2;  // header and first row read
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 5);
  const auto path = std::filesystem::temp_directory_path() / "mantissa_scales_test.csv";
  rec.write_csv(path.string());
  std::ifstream f(path);
  std::stringstream back;
  back << f.rdbuf();
  EXPECT_EQ(back.str(), csv);
  std::filesystem::remove(path);
  // Table: header, rule, one line per row, columns aligned (same width).
  const std::string t = rec.table();
  std::istringstream tin(t);
  std::vector<std::string> tl;
  while (std::getline(tin, line)) tl.push_back(line);
  ASSERT_EQ(tl.size(), 6u);
  for (const auto& l : tl) EXPECT_EQ(l.size(), tl[0].size()) << l;
  EXPECT_NE(t.find("100.000%"), std::string::npos);
  EXPECT_THROW(rec.record("a,b", us::Pass::forward, a.data(), a.size()), std::invalid_argument);
}
