// formats::scaled_copy against a float64 recomputation, on the vector path
// and with the ISA capped to scalar, for lengths around the 16-lane tails and
// inputs holding zeros, subnormals, inf and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/scaled_copy.hpp"

namespace mf = mantissa::formats;

TEST(ScaledCopy, MatchesFloat64RecomputationOnEveryPath) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> e(-140, 20), u(0, 1);
  std::vector<float> x(1000);
  for (auto& v : x) v = static_cast<float>((u(rng) < 0.5 ? -1 : 1) * std::exp2(e(rng)));
  x[3] = 0.0f;
  x[4] = -0.0f;
  const float limit = 448.0f, mult = 0x1p-3f;
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<float> in = x;
    if (variant >= 1) in[517] = -std::numeric_limits<float>::infinity();
    if (variant == 2) in[18] = std::numeric_limits<float>::quiet_NaN();
    for (mf::Isa isa : {mf::Isa::avx512_bf16_fp16, mf::Isa::scalar}) {
      mf::set_max_isa(isa);
      for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{33}, size_t{1000}}) {
        double amax = 0;
        bool bad = false;
        int64_t beyond = 0;
        for (size_t i = 0; i < n; ++i) {
          const double a = std::fabs(static_cast<double>(in[i]));
          if (!std::isnan(a)) amax = std::max(amax, a);
          bad = bad || !std::isfinite(a);
          beyond += std::isfinite(a) && a * mult > limit;
        }
        std::vector<float> out(n + 1, 7.0f);
        const mf::ScanTotals t = mf::scaled_copy(in.data(), out.data(), n, mult, limit);
        const char* where = mf::isa_name(isa);
        EXPECT_EQ(static_cast<double>(t.amax), amax) << where << " n " << n << " variant " << variant;
        EXPECT_EQ(t.nonfinite, bad) << where << " n " << n;
        EXPECT_EQ(t.beyond, beyond) << where << " n " << n;
        for (size_t i = 0; i < n; ++i) {  // the fp32 product (rounded where it is subnormal)
          if (!std::isnan(in[i])) {
            ASSERT_EQ(out[i], in[i] * mult) << where << " i " << i;
          }
        }
        EXPECT_EQ(out[n], 7.0f) << "wrote past the end";
        EXPECT_EQ(mf::scaled_copy(in.data(), nullptr, n, mult, limit).beyond, beyond);
      }
    }
    mf::set_max_isa(mf::Isa::avx512_bf16_fp16);
  }
}
