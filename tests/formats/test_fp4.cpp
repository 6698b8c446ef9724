// FP4 block casts (formats/fp4.hpp): each vector tier's path (AVX2, AVX-512)
// against the scalar reference bit for bit, hand-worked MXFP4/NVFP4 blocks, 2-D blocks under
// transposition, stochastic rounding's probabilities and reproducibility.
#include <gtest/gtest.h>

#include <bit>
#include <cstdlib>
#include <fstream>
#include <string>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "formats/fp4_internal.hpp"
#include "formats/fp4_cases.hpp"
#include "mantissa/formats/fp4.hpp"

namespace mf = mantissa::formats;

namespace {

using fp4_cases::Cap;
using fp4_cases::heavy_tailed;
using fp4_cases::Out;
using fp4_cases::run;
using fp4_cases::vector_caps;
namespace cpu = mantissa::cpu;

float bf16(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace

TEST(Fp4, VectorMatchesReferenceForEverySpec) {
  if (!mf::fp4_vector_available()) GTEST_SKIP() << "no AVX2 on this CPU";
  const std::vector<float> x = heavy_tailed(67 * 45, 7);
  for (cpu::Isa isa : vector_caps()) {  // each vector tier's path
    const Cap cap(isa);
    const char* want = isa >= cpu::Isa::avx512 ? "avx512:" : "avx2:";
    EXPECT_EQ(std::string(mf::detail::fp4_implementation()).rfind(want, 0), 0u) << mf::detail::fp4_implementation();
    for (auto scale : {mf::Fp4Scale::nvfp4, mf::Fp4Scale::mxfp4})
      for (auto round : {mf::Fp4Rounding::nearest_even, mf::Fp4Rounding::stochastic})
        for (auto [tr, tc] :
             std::vector<std::pair<int64_t, int64_t>>{{1, 16}, {16, 1}, {16, 16}, {1, 32}, {32, 1}, {32, 32}})
          for (bool headroom : {false, true}) {
            if (headroom && scale != mf::Fp4Scale::mxfp4) continue;
            const mf::Fp4Spec s{.scale = scale, .tile_rows = tr, .tile_cols = tc, .rounding = round, .seed = 99,
                                .headroom = headroom};
            const Out a = run(true, s, x, 67, 45), b = run(false, s, x, 67, 45);
            SCOPED_TRACE(testing::Message() << cpu::isa_name(isa) << " scale " << int(scale) << " round " << int(round)
                                            << " tile " << tr << "x" << tc << " headroom " << headroom);
            EXPECT_EQ(a.codes, b.codes);
            EXPECT_EQ(a.scales, b.scales);
            EXPECT_EQ(a.dec, b.dec);
            EXPECT_EQ(a.r.tensor_scale, b.r.tensor_scale);
            EXPECT_FALSE(a.r.nonfinite);
          }
  }
}

// One MX block with amax 6: exponent floor(log2 6) - 2 = 0, so the elements
// are rounded as they are; every tie goes to the even code.
TEST(Fp4, MxBlockByHand) {
  const std::vector<float> x = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, -0.2f, -1.1f, 0.0f, -0.0f, 4.4f, 2.9f, 0.3f, 1.6f};
  const std::vector<float> want = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f, -0.0f, -1.0f, 0.0f, -0.0f, 4.0f, 3.0f, 0.5f, 1.5f};
  const mf::Fp4Spec s{.scale = mf::Fp4Scale::mxfp4, .tile_rows = 1, .tile_cols = 32};
  for (bool vec : {false, true}) {
    const Out o = run(vec, s, x, 1, 16);
    EXPECT_EQ(o.scales[0], 127);  // E8M0 code of 2^0
    EXPECT_EQ(o.r.tensor_scale, 1.0f);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(bf16(o.dec[i]), want[i]) << i;
      EXPECT_EQ(std::signbit(bf16(o.dec[i])), std::signbit(want[i])) << i;
      EXPECT_EQ(mf::e2m1_value(o.codes[i]), want[i]) << i;
    }
  }
  // amax 7: exponent still 0, so 7 clips to 6 (OCP's floor rule); with 3/4
  // headroom 7 x 0.75 = 5.25 is inside the range and the tensor scale is 4/3.
  const std::vector<float> y = {7.0f, 1.0f};
  EXPECT_EQ(bf16(run(true, s, y, 1, 2).dec[0]), 6.0f);
  mf::Fp4Spec h = s;
  h.headroom = true;
  const Out o = run(true, h, y, 1, 2);
  EXPECT_EQ(bf16(o.dec[0]), 6.0f);  // 5.25 -> 6 (nearest)
  EXPECT_EQ(bf16(o.dec[1]), 1.0f);  // 0.75 -> tie between 0.5 (code 1) and 1 (code 2): even code
  EXPECT_FLOAT_EQ(o.r.tensor_scale, 4.0f / 3.0f);
}

// NVFP4: tensor scale amax / 2688; a block whose amax is the tensor's gets
// the E4M3 scale 448; a block 100x smaller gets e4m3(448 / 100) = 4.5.
TEST(Fp4, NvBlockScalesByHand) {
  std::vector<float> x(32, 0.0f);
  x[0] = 12.0f;
  x[16] = 0.12f;
  x[17] = -0.06f;
  for (bool vec : {false, true}) {
    const Out o = run(vec, mf::Fp4Spec{}, x, 1, 32);
    EXPECT_FLOAT_EQ(o.r.tensor_scale, 12.0f / 2688.0f);
    EXPECT_EQ(o.scales[0], 0x7E);  // 448
    EXPECT_EQ(o.scales[1], 0x49);  // 4.5 = 1.125 x 2^2: exponent field 9, mantissa 1
    // Decoded values times the tensor scale reproduce x to E2M1's precision.
    EXPECT_NEAR(bf16(o.dec[0]) * o.r.tensor_scale, 12.0f, 1e-5);
    EXPECT_NEAR(bf16(o.dec[16]) * o.r.tensor_scale, 0.12f, 0.12f * 0.02f);  // 0.12 / (t x 4.5) = 5.97 -> 6
    EXPECT_NEAR(bf16(o.dec[17]) * o.r.tensor_scale, -0.06f, 0.06f * 0.02f);
  }
}

TEST(Fp4, TwoDimensionalBlocksSurviveTransposition) {
  const int64_t R = 48, C = 40;
  const std::vector<float> w = heavy_tailed(R * C, 3);
  std::vector<float> wt(w.size());
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) wt[j * R + i] = w[i * C + j];
  for (auto scale : {mf::Fp4Scale::nvfp4, mf::Fp4Scale::mxfp4}) {
    const int64_t b = scale == mf::Fp4Scale::nvfp4 ? 16 : 32;
    const mf::Fp4Spec s{.scale = scale, .tile_rows = b, .tile_cols = b};
    const Out a = run(true, s, w, R, C), t = run(true, s, wt, C, R);
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) ASSERT_EQ(a.dec[i * C + j], t.dec[j * R + i]) << i << "," << j;
    // 1-D blocks along rows do not have that property.
    const mf::Fp4Spec s1{.scale = scale, .tile_rows = 1, .tile_cols = b};
    const Out a1 = run(true, s1, w, R, C), t1 = run(true, s1, wt, C, R);
    int64_t differ = 0;
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) differ += a1.dec[i * C + j] != t1.dec[j * R + i];
    EXPECT_GT(differ, 0);
  }
}

// Stochastic rounding: 1.2 lies 0.4 of the way from 1 to 1.5, so it rounds up
// with probability 0.4; the mean over many elements is 1.2. Same seed, same
// bits; another seed, other bits.
TEST(Fp4, StochasticRoundingIsUnbiasedAndReproducible) {
  const int64_t n = 1 << 16;
  std::vector<float> x(n, 1.2f);
  x[0] = 6.0f;  // block amaxes: MX exponent 0 everywhere via the first element of each 32-block
  for (int64_t i = 0; i < n; i += 32) x[i] = 6.0f;
  const mf::Fp4Spec s{.scale = mf::Fp4Scale::mxfp4, .tile_rows = 1, .tile_cols = 32,
                      .rounding = mf::Fp4Rounding::stochastic, .seed = 5};
  const Out a = run(true, s, x, 1, n), b = run(true, s, x, 1, n);
  EXPECT_EQ(a.dec, b.dec);
  int64_t ups = 0, count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) continue;
    const float v = bf16(a.dec[i]);
    ASSERT_TRUE(v == 1.0f || v == 1.5f) << v;
    ups += v == 1.5f;
    ++count;
  }
  const double p = static_cast<double>(ups) / static_cast<double>(count);
  const double sigma = std::sqrt(0.4 * 0.6 / static_cast<double>(count));
  EXPECT_NEAR(p, 0.4, 5 * sigma);
  mf::Fp4Spec other = s;
  other.seed = 6;
  EXPECT_NE(run(true, other, x, 1, n).dec, a.dec);
}

TEST(Fp4, NonFiniteTensorPassesThroughInBf16) {
  std::vector<float> x = {1.0f, INFINITY, 3.0f, NAN};
  for (bool vec : {false, true}) {
    const Out o = run(vec, mf::Fp4Spec{}, x, 1, 4);
    EXPECT_TRUE(o.r.nonfinite);
    EXPECT_EQ(bf16(o.dec[0]), 1.0f);
    EXPECT_TRUE(std::isinf(bf16(o.dec[1])));
    EXPECT_TRUE(std::isnan(bf16(o.dec[3])));
  }
}

TEST(Fp4, BadSpecsThrow) {
  std::vector<float> x(16, 1.0f);
  uint16_t d[16];
  EXPECT_THROW(mf::fp4_cast(mf::Fp4Spec{.tile_cols = 8}, x.data(), 1, 16, nullptr, nullptr, d), std::invalid_argument);
  EXPECT_THROW(mf::fp4_cast(mf::Fp4Spec{.tile_rows = 0}, x.data(), 1, 16, nullptr, nullptr, d), std::invalid_argument);
  EXPECT_THROW(mf::fp4_cast(mf::Fp4Spec{.headroom = true}, x.data(), 1, 16, nullptr, nullptr, d), std::invalid_argument);
}

// Driven by tests/oracles/test_fp4_blocks.py: casts the raw fp32 file
// $MANTISSA_FP4_ORACLE.in (spec in .spec: "nvfp4|mxfp4 rows cols tile_rows
// tile_cols") and writes .dec (bf16 bits), .scales and .t (tensor scale)
// for the oracle to compare with its own implementation. Skipped otherwise.
TEST(Fp4, OracleDump) {
  const char* prefix = std::getenv("MANTISSA_FP4_ORACLE");
  if (!prefix) GTEST_SKIP() << "run by tests/oracles/test_fp4_blocks.py";
  const std::string p(prefix);
  std::ifstream spec(p + ".spec");
  std::string kind;
  int64_t rows = 0, cols = 0, tr = 0, tc = 0;
  ASSERT_TRUE(spec >> kind >> rows >> cols >> tr >> tc);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  std::ifstream in(p + ".in", std::ios::binary);
  ASSERT_TRUE(in.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(x.size() * 4)));
  const mf::Fp4Spec s{.scale = kind == "nvfp4" ? mf::Fp4Scale::nvfp4 : mf::Fp4Scale::mxfp4, .tile_rows = tr,
                      .tile_cols = tc};
  const Out o = run(true, s, x, rows, cols);
  std::ofstream(p + ".dec", std::ios::binary).write(reinterpret_cast<const char*>(o.dec.data()),
                                                    static_cast<std::streamsize>(o.dec.size() * 2));
  std::ofstream(p + ".scales", std::ios::binary).write(reinterpret_cast<const char*>(o.scales.data()),
                                                       static_cast<std::streamsize>(o.scales.size()));
  std::ofstream(p + ".t", std::ios::binary).write(reinterpret_cast<const char*>(&o.r.tensor_scale), 4);
}
