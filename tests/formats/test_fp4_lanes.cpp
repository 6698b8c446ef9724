// The FP4 vector paths' pieces (each tier the host has) against the scalar
// reference bit for bit (formats/fp4.hpp): the block-scale rule over a sweep of tile maxima and
// tensor scales, the stochastic draws of runs that cross a multiple of 2^32,
// rows wider than 16 tiles, and MXFP4's one-pass cast meeting inf/NaN.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

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

constexpr float kSigns[16] = {1, -1, -1, 1, 1, 1, -1, 1, -1, 1, 1, -1, 1, -1, -1, -1};

// Every 2^k-th non-negative finite pattern plus its neighbours, 0, the
// smallest subnormal and the E4M3 / E8M0 boundaries' neighbourhoods.
std::vector<float> tile_maxima() {
  std::vector<float> a = {0.0f, 0x1p-149f, 0x1p-126f, 6.0f * 448.0f, 3.4028234663852886e38f};
  for (uint32_t b = 0; b < 0x7F800000u; b += 16381)
    for (uint32_t d : {0u, 1u, 2u}) a.push_back(std::bit_cast<float>(std::min(b + d, 0x7F7FFFFFu)));
  // Around every E4M3 value x 6 (the rounding of amax / 6) and halfway points.
  for (int c = 1; c < 0x7F; ++c) {
    const float s = mf::fp4_scale_value(mf::Fp4Scale::nvfp4, static_cast<uint8_t>(c));
    for (float v : {s * 6.0f, s * 6.0f * (1.0f + 0x1p-4f), s * 6.0f * (1.0f + 0x1p-4f) * (1.0f + 0x1p-20f)}) {
      const uint32_t b = std::bit_cast<uint32_t>(v);
      for (uint32_t d = 0; d < 5; ++d) a.push_back(std::bit_cast<float>(b + d - 2));
    }
  }
  return a;
}

}  // namespace

TEST(Fp4Lanes, BlockScalesMatchTheReference) {
  if (!mf::fp4_vector_available()) GTEST_SKIP() << "no AVX2 on this CPU";
  for (cpu::Isa isa : vector_caps()) {  // each vector tier's path
    const Cap cap(isa);
    SCOPED_TRACE(cpu::isa_name(isa));
    const std::vector<float> amax = tile_maxima();
    const int64_t n = static_cast<int64_t>(amax.size());
    for (auto scale : {mf::Fp4Scale::nvfp4, mf::Fp4Scale::mxfp4})
      for (float t : {0x1p-117f, 1.0f / 2688.0f, 1.0f, 0.37f, 4.0f / 3.0f, 1e30f}) {
        std::vector<uint8_t> ca(amax.size()), cb(amax.size());
        std::vector<float> fa(amax.size()), fb(amax.size()), ba(amax.size()), bb(amax.size());
        mf::fp4_block_scales(scale, amax.data(), n, t, ca.data(), fa.data(), ba.data());
        mf::fp4_block_scales_reference(scale, amax.data(), n, t, cb.data(), fb.data(), bb.data());
        int64_t bad = 0;
        for (int64_t i = 0; i < n; ++i)
          if (ca[i] != cb[i] || std::bit_cast<uint32_t>(fa[i]) != std::bit_cast<uint32_t>(fb[i]) ||
              std::bit_cast<uint32_t>(ba[i]) != std::bit_cast<uint32_t>(bb[i])) {
            if (++bad <= 5)
              ADD_FAILURE() << "scale " << int(scale) << " t " << t << " amax " << amax[i] << ": code " << int(ca[i])
                            << " vs " << int(cb[i]) << ", factor " << fa[i] << " vs " << fb[i];
          }
        EXPECT_EQ(bad, 0);
      }
  }
}

// Stochastic draws hash the element index's two 32-bit halves: runs that
// start just below a multiple of 2^32, or far above one, draw as the reference.
TEST(Fp4Lanes, DrawsAcrossTheUpperWordMatchTheReference) {
  for (cpu::Isa isa : vector_caps()) {  // each vector tier's path
    const Cap cap(isa);
    SCOPED_TRACE(cpu::isa_name(isa));
    const std::vector<float> x = heavy_tailed(300, 3);
    std::vector<float> factor(x.size());
    for (size_t i = 0; i < x.size(); ++i) factor[i] = std::ldexp(1.0f, static_cast<int>(i % 9) - 4);
    for (auto scale : {mf::Fp4Scale::nvfp4, mf::Fp4Scale::mxfp4})
      for (uint64_t first : {(uint64_t{1} << 32) - 40, (uint64_t{1} << 32) - 16, (uint64_t{1} << 32) - 1,
                             (uint64_t{5} << 32) + 3, (uint64_t{7} << 32) - 300}) {
        std::vector<uint8_t> a(x.size()), b(x.size());
        mf::fp4_round_elements(scale, x.data(), factor.data(), 300, mf::Fp4Rounding::stochastic, 11, first, a.data());
        mf::fp4_round_elements_reference(scale, x.data(), factor.data(), 300, mf::Fp4Rounding::stochastic, 11, first,
                                         b.data());
        EXPECT_EQ(a, b) << "first index " << first;
      }
  }
}

// Rows of more than 16 tiles (tile maxima 16 at a time), a partial last tile,
// and enough elements for the casts to run on several threads.
TEST(Fp4Lanes, WideRowsMatchTheReference) {
  if (!mf::fp4_vector_available()) GTEST_SKIP() << "no AVX2 on this CPU";
  for (cpu::Isa isa : vector_caps()) {  // each vector tier's path
    const Cap cap(isa);
    SCOPED_TRACE(cpu::isa_name(isa));
    const int64_t rows = 70, cols = 1000;
    const std::vector<float> x = heavy_tailed(static_cast<size_t>(rows * cols), 21);
    for (auto scale : {mf::Fp4Scale::nvfp4, mf::Fp4Scale::mxfp4})
      for (auto round : {mf::Fp4Rounding::nearest_even, mf::Fp4Rounding::stochastic})
        for (int64_t b : {16, 32})
          for (auto [tr, tc] : std::vector<std::pair<int64_t, int64_t>>{{1, b}, {b, 1}, {b, b}}) {
            const mf::Fp4Spec s{.scale = scale, .tile_rows = tr, .tile_cols = tc, .rounding = round, .seed = 4,
                                .headroom = scale == mf::Fp4Scale::mxfp4 && round == mf::Fp4Rounding::stochastic};
            SCOPED_TRACE(testing::Message() << "scale " << int(scale) << " round " << int(round) << " tile " << tr
                                            << "x" << tc);
            const Out a = run(true, s, x, rows, cols), r = run(false, s, x, rows, cols);
            EXPECT_EQ(a.codes, r.codes);
            EXPECT_EQ(a.scales, r.scales);
            EXPECT_EQ(a.dec, r.dec);
            EXPECT_EQ(a.r.tensor_scale, r.r.tensor_scale);
          }
  }
}

// MXFP4 casts in one pass and watch for inf/NaN on the way: one bad value in
// the last band (or one that only the rotation makes) turns the whole tensor
// into the pass-through, as the reference does, every output overwritten.
TEST(Fp4Lanes, MxOnePassFindsNonFiniteValues) {
  for (cpu::Isa isa : vector_caps()) {  // each vector tier's path
    const Cap cap(isa);
    SCOPED_TRACE(cpu::isa_name(isa));
    const int64_t rows = 96, cols = 700;
    for (float bad : {INFINITY, NAN, 3e38f})
      for (bool rotate : {false, true})
        for (auto [tr, tc] : std::vector<std::pair<int64_t, int64_t>>{{1, 32}, {32, 1}, {32, 32}})
          for (bool packed : {false, true}) {
            if (bad == 3e38f && !rotate) continue;  // finite unless rotated
            std::vector<float> x = heavy_tailed(static_cast<size_t>(rows * cols), 5);
            if (bad == 3e38f)  // a 16 x 16 group of 3e38: its rotation overflows along either axis
              for (int64_t i = 64; i < 80; ++i)
                for (int64_t j = 0; j < 16; ++j) x[static_cast<size_t>(i * cols + j)] = 3e38f;
            else
              x[static_cast<size_t>((rows - 1) * cols + cols - 3)] = bad;
            mf::Fp4Spec s{.scale = mf::Fp4Scale::mxfp4, .tile_rows = tr, .tile_cols = tc,
                          .rounding = mf::Fp4Rounding::stochastic, .seed = 8, .headroom = true, .packed = packed};
            if (rotate) {
              s.rht_signs = kSigns;
              s.rht_axis = tr == 1 ? 2 : 1;
            }
            SCOPED_TRACE(testing::Message() << "bad " << bad << " rotate " << rotate << " tile " << tr << "x" << tc
                                            << " packed " << packed);
            const Out a = run(true, s, x, rows, cols), r = run(false, s, x, rows, cols);
            EXPECT_TRUE(a.r.nonfinite);
            EXPECT_TRUE(r.r.nonfinite);
            EXPECT_EQ(a.codes, r.codes);
            EXPECT_EQ(a.scales, r.scales);
            EXPECT_EQ(a.dec, r.dec);
            EXPECT_EQ(a.r.tensor_scale, r.r.tensor_scale);
          }
  }
}
