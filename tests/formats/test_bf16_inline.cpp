// The inline bf16 conversions kernels round with as they compute
// (formats/bf16.hpp) against the scalar reference (round.hpp): every bf16
// code, and around every code the fp32 inputs that decide its rounding
// (exact value, just above, ties, just below the next code).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "mantissa/formats/bf16.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"

namespace mf = mantissa::formats;

TEST(Bf16Inline, RoundsAsTheReferenceAtEveryRoundingBoundary) {
  const mf::Format& bf16 = mf::preset("bf16");
  int64_t checked = 0, nans = 0;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xc000u, 0xffffu}) {
      const float x = std::bit_cast<float>(hi << 16 | lo);
      const uint16_t got = mf::round_bf16(x);
      const uint32_t want = mf::encode(bf16, x);
      if (std::isnan(x)) {  // any NaN code of the same sign
        ASSERT_TRUE(mf::is_nan_code(bf16, got)) << std::hex << (hi << 16 | lo);
        ASSERT_EQ(got >> 15, want >> 15) << std::hex << (hi << 16 | lo);
        ++nans;
      } else {
        ASSERT_EQ(got, want) << std::hex << (hi << 16 | lo);
      }
      ++checked;
    }
  EXPECT_EQ(checked, 7 * 65536);
  EXPECT_EQ(nans, 7 * 254 + 2 * 6);  // 254 NaN top halves; +-inf with a nonzero low half
}

TEST(Bf16Inline, WidensEveryCodeExactly) {
  const mf::Format& bf16 = mf::preset("bf16");
  for (uint32_t c = 0; c < 0x10000u; ++c) {
    const float got = mf::widen_bf16(static_cast<uint16_t>(c));
    const float want = mf::decode_f32(bf16, c);
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << std::hex << c;
    else ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << std::hex << c;
  }
}
