// MX block quantisation against a float64 reference: the shared scale from
// frexp, the elements as code x 2^scale, and exact round trips for values that
// are representable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/mx.hpp"

namespace mf = mantissa::formats;

namespace {

const char* const kPresets[] = {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8"};

// OCP element emax and max: from the spec text, not from the library.
struct ElementFacts {
  int emax;
  double max;
};
ElementFacts facts(const char* name) {
  const std::string n = name;
  if (n == "mxfp8_e4m3") return {8, 448};
  if (n == "mxfp8_e5m2") return {15, 57344};
  if (n == "mxfp6_e2m3") return {2, 7.5};
  if (n == "mxfp6_e3m2") return {4, 28};
  if (n == "mxfp4") return {2, 6};
  return {0, 127.0 / 64};  // mxint8
}

int floor_log2(double x) {
  int e = 0;
  (void)std::frexp(x, &e);
  return e - 1;
}

// Expected scale exponent, clipped to E8M0.
int expected_scale(const char* name, mf::ScaleRounding rule, double amax) {
  const ElementFacts ef = facts(name);
  int s = floor_log2(amax) - ef.emax;
  if (rule == mf::ScaleRounding::ceil && amax / std::ldexp(1.0, s) > ef.max) ++s;
  return std::max(-127, std::min(127, s));
}

double element_value(const mf::MxConfig& cfg, uint32_t code) {
  if (cfg.element.kind == mf::Kind::integer) return static_cast<int8_t>(static_cast<uint8_t>(code)) / 64.0;
  return mf::decode(cfg.element, code);
}

std::vector<float> mixed_magnitude_data(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-20, 20);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::ldexp(normal(rng), (i / 32) % 7 == 3 ? exp(rng) : 0);
  return v;
}

}  // namespace

TEST(Mx, ScalesElementsAndDequantiseMatchFloat64Reference) {
  for (const char* name : kPresets) {
    for (const auto rule : {mf::ScaleRounding::floor, mf::ScaleRounding::ceil}) {
      SCOPED_TRACE(std::string(name) + (rule == mf::ScaleRounding::ceil ? " ceil" : " floor"));
      mf::MxConfig cfg = mf::mx_preset(name);
      cfg.scale_rounding = rule;
      for (const size_t n : {size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{100}, size_t{1000}}) {
        const std::vector<float> x = mixed_magnitude_data(n, static_cast<uint32_t>(n));
        const mf::MxArray a = mf::mx_quantize(cfg, x.data(), n);
        ASSERT_EQ(a.n, n);
        ASSERT_EQ(a.scales.size(), (n + 31) / 32);
        ASSERT_EQ(a.codes.size(), n);
        std::vector<float> y(n);
        mf::mx_dequantize(cfg, a, y.data());
        const ElementFacts ef = facts(name);
        for (size_t b = 0; b < a.scales.size(); ++b) {
          double amax = 0;
          for (size_t i = b * 32; i < std::min(n, b * 32 + 32); ++i) amax = std::max(amax, std::fabs(double{x[i]}));
          const int s = expected_scale(name, rule, amax);
          ASSERT_EQ(a.scales[b], s + 127) << "block " << b;
          for (size_t i = b * 32; i < std::min(n, b * 32 + 32); ++i) {
            const double ev = element_value(cfg, a.codes[i]);
            const double ref = ev * std::ldexp(1.0, s);
            ASSERT_EQ(double{y[i]}, static_cast<double>(static_cast<float>(ref))) << i;
            // Error bound: the element's own rounding, or clipping at max.
            const double scaled = x[i] / std::ldexp(1.0, s);
            const double bound = std::fabs(scaled) > ef.max ? std::fabs(scaled) - ef.max
                                 : cfg.element.kind == mf::Kind::integer
                                     ? 0.5 / 64
                                     : 0.5 * std::max(std::ldexp(1.0, floor_log2(std::fabs(scaled)) - cfg.element.mantissa_bits),
                                                      cfg.element.min_subnormal());
            EXPECT_LE(std::fabs(ev - scaled), bound * (1 + 1e-12)) << i << " x=" << x[i];
            if (rule == mf::ScaleRounding::ceil) {
              EXPECT_LE(std::fabs(scaled), ef.max);
            }
          }
        }
      }
    }
  }
}

TEST(Mx, RepresentableBlocksRoundTripExactly) {
  // Values built as element x 2^s with the block's max element present
  // reproduce bit for bit (the scale rule picks back the same s).
  for (const char* name : kPresets) {
    SCOPED_TRACE(name);
    const mf::MxConfig cfg = mf::mx_preset(name);
    const ElementFacts ef = facts(name);
    std::mt19937 rng(5);
    std::vector<float> x(70);
    for (size_t i = 0; i < x.size(); ++i) {
      const int s = static_cast<int>(i / 32) * 3 - 2;
      const uint32_t code = rng() % (cfg.element.kind == mf::Kind::integer ? 256 : cfg.element.code_count());
      double v = element_value(cfg, code);
      if (std::isnan(v) || std::fabs(v) > ef.max || (cfg.element.kind == mf::Kind::integer && code == 0x80)) v = 0;
      if (i % 32 == 0) v = std::ldexp(1.0, ef.emax);  // pins floor(log2 amax) to emax + s
      x[i] = static_cast<float>(std::ldexp(v, s));
    }
    const auto a = mf::mx_quantize(cfg, x.data(), x.size());
    std::vector<float> y(x.size());
    mf::mx_dequantize(cfg, a, y.data());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i]) << i;
  }
}

TEST(Mx, ZeroBlocksSpecialsClippingAndBadConfigs) {
  const mf::MxConfig cfg = mf::mx_preset("mxfp8_e4m3");
  std::vector<float> x(40, 0.0f);
  x[3] = -0.0f;
  x[35] = NAN;
  x[36] = 1.0f;
  auto a = mf::mx_quantize(cfg, x.data(), x.size());
  EXPECT_EQ(a.scales[0], 0x00);  // zero block: 2^-127
  EXPECT_EQ(a.codes[3], 0x80);   // -0 kept by e4m3fn
  EXPECT_EQ(a.scales[1], 0xff);  // NaN in the block: NaN scale
  std::vector<float> y(x.size());
  mf::mx_dequantize(cfg, a, y.data());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_TRUE(std::signbit(y[3]));
  for (size_t i = 32; i < 40; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
  // Clipping to the E8M0 range: tiny and huge amax.
  std::vector<float> tiny(1, std::ldexp(1.0f, -149)), huge(1, 3e38f);
  EXPECT_EQ(mf::mx_quantize(cfg, tiny.data(), 1).scales[0], 0);  // -149 - 8 clipped to -127
  EXPECT_EQ(mf::mx_quantize(cfg, huge.data(), 1).scales[0], 127 + 127 - 8);
  // Floor rule saturates the elements of a block whose amax mantissa exceeds
  // the element max (OCP); ceil moves the scale instead.
  std::vector<float> z = {500.0f, 1.0f};
  auto fl = mf::mx_quantize(cfg, z.data(), 2);
  EXPECT_EQ(fl.scales[0], 127);
  EXPECT_EQ(fl.codes[0], 0x7e);  // 448
  mf::MxConfig c2 = cfg;
  c2.scale_rounding = mf::ScaleRounding::ceil;
  auto ce = mf::mx_quantize(c2, z.data(), 2);
  EXPECT_EQ(ce.scales[0], 128);
  EXPECT_EQ(mf::decode(cfg.element, ce.codes[0]), 256);  // 250 -> 256 in e4m3fn
  // MXINT8: 1.5 with amax 1.5 -> scale 2^0, code 1.5 * 64 = 96.
  const mf::MxConfig i8 = mf::mx_preset("mxint8");
  std::vector<float> w = {1.5f, -0.25f, 0.0078125f};
  auto ia = mf::mx_quantize(i8, w.data(), 3);
  EXPECT_EQ(ia.scales[0], 127);
  EXPECT_EQ(ia.codes[0], 96);
  EXPECT_EQ(ia.codes[1], 0xf0);  // -16
  EXPECT_EQ(ia.codes[2], 0);     // 0.5 code: tie to even 0
  EXPECT_THROW(mf::mx_preset("mxfp9"), std::invalid_argument);
  mf::MxConfig bad = cfg;
  bad.block = 0;
  EXPECT_THROW(mf::mx_quantize(bad, w.data(), 3), std::invalid_argument);
  bad = cfg;
  bad.element = mf::preset("e8m0");
  EXPECT_THROW(mf::mx_quantize(bad, w.data(), 3), std::invalid_argument);
  mf::MxArray broken = ia;
  broken.codes.pop_back();
  EXPECT_THROW(mf::mx_dequantize(i8, broken, y.data()), std::invalid_argument);
}

// The AVX-512 kernel against mx.cpp's scalar loop, bit for bit: test_mx_vector.cpp.
