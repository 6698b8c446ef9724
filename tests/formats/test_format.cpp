// Format descriptors against the formats' published tables (IEEE 754, OCP
// FP8 and MX v1.0), transcribed literally, the
// user-defined format parser, and the codes of special values (NaN, inf, -0,
// overflow, underflow) that ml_dtypes and the OCP spec fix.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>

#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"

namespace mf = mantissa::formats;

namespace {

// First table: exponent bits, mantissa bits, emax, emin.
struct RangeRow {
  const char* format;
  int exp, mant, emax, emin;
};
constexpr RangeRow kRangeTable[] = {
    {"fp32", 8, 23, 127, -126},    {"tf32", 8, 10, 127, -126},   {"bf16", 8, 7, 127, -126},
    {"fp16", 5, 10, 15, -14},      {"e5m2fnuz", 5, 2, 15, -15},  {"e5m2", 5, 2, 15, -14},
    {"e4m3fnuz", 4, 3, 7, -7},     {"e4m3fn", 4, 3, 8, -6},
};

// Second table: properties. Values as the table writes them; `nan`
// summarises the NaN column; min_subnormal 0 stands for "none".
struct PropertyRow {
  const char* format;
  int bias;
  double max, min_normal, min_subnormal;
  bool inf;
  mf::NanEncoding nan;
  bool negative_zero;
};
const PropertyRow kPropertyTable[] = {
    {"bf16", 127, (2 - std::ldexp(1, -7)) * std::ldexp(1, 127), std::ldexp(1, -126), std::ldexp(1, -133), true,
     mf::NanEncoding::ieee, true},
    {"fp16", 15, 65504, std::ldexp(1, -14), std::ldexp(1, -24), true, mf::NanEncoding::ieee, true},
    {"e4m3fn", 7, 448, std::ldexp(1, -6), std::ldexp(1, -9), false, mf::NanEncoding::fn, true},
    {"e4m3fnuz", 8, 240, std::ldexp(1, -7), std::ldexp(1, -10), false, mf::NanEncoding::fnuz, false},
    {"e4m3", 7, 240, std::ldexp(1, -6), std::ldexp(1, -9), true, mf::NanEncoding::ieee, true},
    {"e4m3b11fnuz", 11, 30, std::ldexp(1, -10), std::ldexp(1, -13), false, mf::NanEncoding::fnuz, false},
    {"e5m2", 15, 57344, std::ldexp(1, -14), std::ldexp(1, -16), true, mf::NanEncoding::ieee, true},
    {"e5m2fnuz", 16, 57344, std::ldexp(1, -15), std::ldexp(1, -17), false, mf::NanEncoding::fnuz, false},
    {"e3m4", 3, 15.5, std::ldexp(1, -2), std::ldexp(1, -6), true, mf::NanEncoding::ieee, true},
    {"e8m0", 127, std::ldexp(1, 127), std::ldexp(1, -127), 0, false, mf::NanEncoding::fn, false},
    {"e2m3fn", 1, 7.5, 1, 0.125, false, mf::NanEncoding::none, true},
    {"e3m2fn", 3, 28, 0.25, 0.0625, false, mf::NanEncoding::none, true},
    {"e2m1fn", 1, 6, 1, 0.5, false, mf::NanEncoding::none, true},
};

}  // namespace

TEST(Format, RangeTableOfBriefComesOutExactly) {
  for (const auto& row : kRangeTable) {
    SCOPED_TRACE(row.format);
    const auto& f = mf::preset(row.format);
    EXPECT_EQ(f.exponent_bits, row.exp);
    EXPECT_EQ(f.mantissa_bits, row.mant);
    EXPECT_EQ(f.max_exponent(), row.emax);
    EXPECT_EQ(f.min_exponent(), row.emin);
  }
}

TEST(Format, PropertyTableOfBriefComesOutExactly) {
  for (const auto& row : kPropertyTable) {
    SCOPED_TRACE(row.format);
    const auto& f = mf::preset(row.format);
    EXPECT_EQ(f.bias, row.bias);
    EXPECT_EQ(f.max(), row.max);
    EXPECT_EQ(f.min_normal(), row.min_normal);
    if (row.min_subnormal == 0) {
      EXPECT_FALSE(f.subnormals);
      EXPECT_EQ(f.min_subnormal(), f.min_normal());
    } else {
      EXPECT_EQ(f.min_subnormal(), row.min_subnormal);
    }
    EXPECT_EQ(f.has_inf, row.inf);
    EXPECT_EQ(f.nan, row.nan);
    EXPECT_EQ(f.negative_zero, row.negative_zero);
  }
  const auto& e8m0 = mf::preset("e8m0");
  EXPECT_FALSE(e8m0.is_signed);
  EXPECT_EQ(e8m0.kind, mf::Kind::exponent);
}

TEST(Format, DerivedSizesAndFp32Limits) {
  const auto& fp32 = mf::preset("fp32");
  EXPECT_EQ(fp32.max(), static_cast<double>(std::numeric_limits<float>::max()));
  EXPECT_EQ(fp32.min_normal(), static_cast<double>(std::numeric_limits<float>::min()));
  EXPECT_EQ(fp32.min_subnormal(), static_cast<double>(std::numeric_limits<float>::denorm_min()));
  EXPECT_EQ(fp32.epsilon(), static_cast<double>(std::numeric_limits<float>::epsilon()));
  struct Size {
    const char* name;
    int bits, bytes, shift;
  };
  for (const Size s : {Size{"fp32", 32, 4, 0}, Size{"tf32", 19, 4, 13}, Size{"bf16", 16, 2, 0},
                       Size{"fp16", 16, 2, 0}, Size{"e4m3fn", 8, 1, 0}, Size{"e3m2fn", 6, 1, 0},
                       Size{"e2m1fn", 4, 1, 0}, Size{"e8m0", 8, 1, 0}, Size{"int8", 8, 1, 0}}) {
    SCOPED_TRACE(s.name);
    const auto& f = mf::preset(s.name);
    EXPECT_EQ(f.total_bits(), s.bits);
    EXPECT_EQ(f.storage_bytes(), s.bytes);
    EXPECT_EQ(f.packed_shift(), s.shift);
    EXPECT_EQ(f.code_count(), uint64_t{1} << s.bits);
  }
  EXPECT_EQ(mf::preset("int8").max(), 127);
  EXPECT_EQ(mf::preset("e4m3fn").epsilon(), 0.125);
}

TEST(Format, PresetListIsCompleteAndNamed) {
  std::set<std::string> names;
  for (const auto& f : mf::presets()) names.insert(f.name);
  const std::set<std::string> want = {"fp32", "tf32", "bf16", "fp16", "e5m2", "e5m2fnuz", "e4m3fn", "e4m3fnuz",
                                      "e4m3", "e4m3b11fnuz", "e3m4", "e8m0", "e2m3fn", "e3m2fn", "e2m1fn", "int8"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(mf::preset_names().substr(0, 12), "fp32, tf32, ");
  try {
    (void)mf::preset("e9m9");
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("e9m9"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("e4m3fnuz"), std::string::npos);
  }
}

TEST(Format, UserDefinedFormatsFollowIeeeDefaultsAndOptions) {
  const auto e5m2 = mf::parse_format("e5m2");  // the preset
  EXPECT_EQ(e5m2.max(), 57344);
  const auto e3m3 = mf::parse_format("e3m3");  // IEEE: bias 3, emax 3, max 1.875*8
  EXPECT_EQ(e3m3.bias, 3);
  EXPECT_TRUE(e3m3.has_inf);
  EXPECT_EQ(e3m3.max(), 15);
  EXPECT_EQ(e3m3.min_subnormal(), std::ldexp(1, -5));
  const auto b4 = mf::parse_format("e3m3:bias=4:nan=none");  // all 8 binades finite: 1.875 * 2^(7-4)
  EXPECT_FALSE(b4.has_inf);
  EXPECT_EQ(b4.max(), 15);
  EXPECT_EQ(b4.min_normal(), std::ldexp(1, -3));
  const auto fz = mf::parse_format("e4m3:nan=fnuz");  // = e4m3fnuz
  EXPECT_EQ(fz.bias, 8);
  EXPECT_FALSE(fz.negative_zero);
  EXPECT_EQ(fz.max(), 240);
  const auto fn = mf::parse_format("e4m3:nan=fn");  // = e4m3fn
  EXPECT_EQ(fn.max(), 448);
  const auto ns = mf::parse_format("e5m6:inf=0:nan=none:negzero=0:subnormals=0");
  EXPECT_FALSE(ns.subnormals);
  EXPECT_EQ(ns.min_subnormal(), ns.min_normal());
  EXPECT_EQ(ns.max(), (2 - std::ldexp(1, -6)) * std::ldexp(1, 16));
  EXPECT_EQ(ns.name, "e5m6:inf=0:nan=none:negzero=0:subnormals=0");
  const auto over = mf::parse_format("e4m3fn:subnormals=0");  // options override a preset
  EXPECT_FALSE(over.subnormals);
  EXPECT_EQ(over.max(), 448);
}

TEST(Format, BadSpecsNameTheProblem) {
  struct Bad {
    const char* spec;
    const char* mention;
  };
  for (const Bad b : {Bad{"e0m3", "exponent bits"}, Bad{"e12m3", "exponent bits"}, Bad{"e8m24", "<= 31"},
                      Bad{"e4m3:bias=x", "bias"}, Bad{"e4m3:colour=1", "colour"}, Bad{"e4m3:nan=weird", "weird"},
                      Bad{"e4m3:inf=1:nan=fn", "inf=1"}, Bad{"e4m3:nan=fnuz:negzero=1", "negzero"},
                      Bad{"e4m3:bias=2000", "double"}, Bad{"fp9", "fp9"}, Bad{"e4m3:inf", "key=value"},
                      Bad{"e5m0", "inf=0"}, Bad{"e4m3:bias=-2147483648", "bias must be in [-4096, 4096]"},
                      Bad{"e4m3:bias=2147483647", "bias must be in"}, Bad{"e4m3:bias=99999999999", "bias"},
                      Bad{"e1m2147483647", "<= 31"}, Bad{"e2147483647m1", "exponent bits"},
                      Bad{"e4m3:bias=-4097", "bias must be in"}}) {
    SCOPED_TRACE(b.spec);
    try {
      (void)mf::parse_format(b.spec);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(b.mention), std::string::npos) << e.what();
    }
  }
}

// ---- Special values, overflow policy, saturation, flush --------------------

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
uint32_t enc(const char* name, double x, mf::RoundOptions opt = {}) { return mf::encode(mf::preset(name), x, opt); }
}  // namespace

TEST(Round, OverflowMatchesMlDtypesAndSaturates) {
  const mf::RoundOptions sat{.saturate = true};
  EXPECT_EQ(enc("e4m3fn", 464), 0x7eu);  // tie between 448 and 480 (the NaN slot) goes to even 448
  EXPECT_EQ(enc("e4m3fn", 465), 0x7fu);  // NaN
  EXPECT_EQ(enc("e4m3fn", -465), 0xffu);
  EXPECT_EQ(enc("e4m3fn", 465, sat), 0x7eu);
  EXPECT_EQ(enc("e4m3fn", -1e30, sat), 0xfeu);
  EXPECT_EQ(enc("e5m2", 61440), 0x7cu);    // tie between 57344 and 65536 -> inf (57344 is odd)
  EXPECT_EQ(enc("e5m2", 61439.9), 0x7bu);  // just below the tie
  EXPECT_EQ(enc("e5m2", 1e6, sat), 0x7bu);
  EXPECT_EQ(enc("e4m3fnuz", 300), 0x80u);  // fnuz: the only NaN
  EXPECT_EQ(enc("e4m3fnuz", -300), 0x80u);
  EXPECT_EQ(enc("e4m3fnuz", -300, sat), 0xffu);
  EXPECT_EQ(enc("fp16", 65520), 0x7c00u);  // fp16 overflow threshold
  EXPECT_EQ(enc("fp16", 65519.99), 0x7bffu);
  EXPECT_EQ(enc("bf16", 1e39), 0x7f80u);
  EXPECT_EQ(enc("e2m1fn", 100), 0x7u);  // FP6/FP4 always saturate
  EXPECT_EQ(enc("e2m3fn", -100), 0x3fu);
  EXPECT_EQ(enc("e3m2fn", 1e300), 0x1fu);
  EXPECT_EQ(enc("int8", 1000), 0x7fu);
  EXPECT_EQ(enc("int8", -1000), 0x81u);
  // Directed rounding toward zero never overflows (IEEE 754); away does.
  EXPECT_EQ(enc("e5m2", 1e6, {.mode = mf::Round::toward_zero}), 0x7bu);
  EXPECT_EQ(enc("e5m2", 1e6, {.mode = mf::Round::down}), 0x7bu);
  EXPECT_EQ(enc("e5m2", -1e6, {.mode = mf::Round::down}), 0xfcu);
  EXPECT_EQ(enc("e5m2", -1e6, {.mode = mf::Round::up}), 0xfbu);
  EXPECT_EQ(enc("e4m3fn", 449, {.mode = mf::Round::up}), 0x7fu);
  EXPECT_EQ(enc("e4m3fn", 479, {.mode = mf::Round::toward_zero}), 0x7eu);
}

TEST(Round, NanInfAndSignedZero) {
  EXPECT_EQ(enc("e4m3fn", kNaN), 0x7fu);
  EXPECT_EQ(enc("e4m3fn", -kNaN), 0xffu);
  EXPECT_EQ(enc("e5m2", kNaN), 0x7eu);
  EXPECT_EQ(enc("bf16", -kNaN), 0xffc0u);
  EXPECT_EQ(enc("fp32", kNaN), 0x7fc00000u);
  EXPECT_EQ(enc("e5m2fnuz", kNaN), 0x80u);
  EXPECT_EQ(enc("e8m0", kNaN), 0xffu);
  EXPECT_EQ(enc("e2m1fn", kNaN), 0x0u);  // no NaN code: +0 (documented in round.cpp)
  EXPECT_EQ(enc("int8", -kNaN), 0x0u);
  EXPECT_EQ(enc("e5m2", kInf), 0x7cu);
  EXPECT_EQ(enc("e5m2", -kInf), 0xfcu);
  EXPECT_EQ(enc("e5m2", -kInf, {.saturate = true}), 0xfbu);
  EXPECT_EQ(enc("e5m2", kInf, {.mode = mf::Round::toward_zero}), 0x7cu);  // inf is exact, not an overflow
  EXPECT_EQ(enc("e4m3fn", kInf), 0x7fu);
  EXPECT_EQ(enc("e4m3fn", -kInf, {.saturate = true}), 0xfeu);
  EXPECT_EQ(enc("e2m3fn", -kInf), 0x3fu);
  EXPECT_EQ(enc("e8m0", kInf), 0xffu);
  EXPECT_EQ(enc("e8m0", kInf, {.saturate = true}), 0xfeu);
  EXPECT_EQ(enc("e4m3fn", -0.0), 0x80u);
  EXPECT_EQ(enc("e4m3fnuz", -0.0), 0x00u);
  EXPECT_EQ(enc("e2m1fn", -0.0), 0x8u);
  EXPECT_EQ(enc("int8", -0.0), 0x0u);
  EXPECT_EQ(enc("e8m0", 0.0), 0xffu);
  EXPECT_EQ(enc("e8m0", -4.0), 0xffu);
  EXPECT_TRUE(std::isinf(mf::decode(mf::preset("fp16"), 0xfc00)));
  EXPECT_TRUE(std::signbit(mf::decode(mf::preset("fp16"), 0x8000)));
  EXPECT_TRUE(std::isnan(mf::decode(mf::preset("e8m0"), 0xff)));
}

TEST(Round, UnderflowToSubnormalsZeroAndFlush) {
  const auto& e4 = mf::preset("e4m3fn");
  EXPECT_EQ(mf::encode(e4, std::ldexp(1, -9)), 0x01u);         // min subnormal
  EXPECT_EQ(mf::encode(e4, std::ldexp(1, -10)), 0x00u);        // half of it: tie to even 0
  EXPECT_EQ(mf::encode(e4, std::ldexp(1.0001, -10)), 0x01u);   // above half
  EXPECT_EQ(mf::encode(e4, -std::ldexp(1, -10)), 0x80u);       // -0 kept
  EXPECT_EQ(mf::encode(e4, std::ldexp(3, -10)), 0x02u);        // 1.5 min subnormals: tie to even 2
  EXPECT_EQ(mf::encode(e4, 1e-300, {.mode = mf::Round::up}), 0x01u);
  EXPECT_EQ(mf::encode(e4, -1e-300, {.mode = mf::Round::up}), 0x80u);
  EXPECT_EQ(mf::encode(e4, std::ldexp(1, -1074)), 0x00u);      // fp64 subnormal input
  const auto& fz = mf::preset("e5m2fnuz");
  EXPECT_EQ(mf::encode(fz, -std::ldexp(1, -19)), 0x00u);       // fnuz: -0 becomes +0
  const mf::RoundOptions flush{.flush_subnormals = true};
  EXPECT_EQ(mf::encode(e4, std::ldexp(5, -9), flush), 0x00u);
  EXPECT_EQ(mf::encode(e4, -std::ldexp(5, -9), flush), 0x80u);
  EXPECT_EQ(mf::encode(e4, std::ldexp(1, -6), flush), 0x08u);  // min normal survives
  EXPECT_EQ(mf::encode(e4, std::ldexp(15.5, -10), flush), 0x08u);  // rounds up to min normal first
  EXPECT_EQ(enc("fp16", std::ldexp(1, -24)), 0x0001u);
  EXPECT_EQ(enc("fp16", std::ldexp(1, -25)), 0x0000u);
  EXPECT_EQ(enc("bf16", std::ldexp(1, -133)), 0x0001u);
  // e8m0 has no zero: tiny positives clamp to 2^-127 (ml_dtypes gives the same).
  EXPECT_EQ(enc("e8m0", std::ldexp(1, -130)), 0x00u);
  EXPECT_EQ(enc("e8m0", std::ldexp(1.4, -127)), 0x00u);  // correctly rounded (ml_dtypes 0.6 says 0x01)
  EXPECT_EQ(enc("e8m0", 1.5), 0x80u);  // ties round up, as ml_dtypes and PyTorch
  EXPECT_EQ(enc("e8m0", 3.0), 0x81u);
  EXPECT_EQ(enc("e8m0", 1.4), 0x7fu);
  EXPECT_EQ(enc("e8m0", 1.4, {.mode = mf::Round::up}), 0x80u);
  EXPECT_EQ(enc("e8m0", std::ldexp(1, 127)), 0xfeu);
  EXPECT_EQ(enc("e8m0", std::ldexp(1.5, 127)), 0xffu);
}

TEST(Round, Fp32IdentityTf32LayoutAndInt8) {
  const auto& fp32 = mf::preset("fp32");
  for (const float x : {0.0f, -0.0f, 1.0f, -3.5e-42f, 3.4028235e38f, 1e-45f, 0.1f, -123456.78f}) {
    EXPECT_EQ(mf::encode(fp32, x), std::bit_cast<uint32_t>(x));
    EXPECT_EQ(mf::decode_f32(fp32, std::bit_cast<uint32_t>(x)), x);
  }
  // fp64 -> fp32 rounds once, exactly: 1 + 2^-24 is a tie, 1 + 2^-24 + 2^-60 is not.
  EXPECT_EQ(mf::encode(fp32, 1.0 + std::ldexp(1, -24)), 0x3f800000u);
  EXPECT_EQ(mf::encode(fp32, 1.0 + std::ldexp(1, -24) + std::ldexp(1, -52)), 0x3f800001u);
  const auto& tf32 = mf::preset("tf32");
  EXPECT_EQ(mf::encode(tf32, 1.0f), 0x3f800000u);
  EXPECT_EQ(mf::encode(tf32, 1.0 + std::ldexp(1, -10)), 0x3f802000u);
  EXPECT_EQ(mf::encode(tf32, 1.0 + std::ldexp(1, -11)), 0x3f800000u);  // tie to even
  EXPECT_EQ(mf::encode(tf32, 1.0 + std::ldexp(3, -11)), 0x3f804000u);  // tie to even (up)
  EXPECT_EQ(mf::encode(tf32, kNaN), 0x7fc00000u);
  EXPECT_EQ(mf::encode(tf32, -kInf), 0xff800000u);
  for (uint32_t c : {0x3f802000u, 0x00002000u, 0x80000000u, 0x7f7fe000u}) {
    EXPECT_EQ(mf::encode(tf32, mf::decode(tf32, c)), c);
    EXPECT_EQ(c & 0x1fffu, 0u);
  }
  EXPECT_EQ(mf::decode(tf32, 0x7f7fe000u), tf32.max());
  EXPECT_EQ(enc("int8", 2.5), 0x02u);
  EXPECT_EQ(enc("int8", -2.5), 0xfeu);
  EXPECT_EQ(enc("int8", 2.5, {.mode = mf::Round::nearest_away}), 0x03u);
  EXPECT_EQ(enc("int8", -0.4, {.mode = mf::Round::down}), 0xffu);
  EXPECT_EQ(enc("int8", 126.5), 0x7eu);
  EXPECT_EQ(enc("int8", 127.4), 0x7fu);
  EXPECT_EQ(mf::decode(mf::preset("int8"), 0x81), -127);
}
