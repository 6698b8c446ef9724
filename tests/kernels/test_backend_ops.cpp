// Every kernel family with implementations chosen by instruction set, run
// under every ISA cap this host can honour (scalar up to the detected set),
// on every storage type it takes (fp32, bf16, 1-byte FP8 codes), against a
// float64 reference computed here from the formats' definitions (sign,
// exponent bits, mantissa bits, bias), not from the library's decoder.
// Also checks that each family reports the implementation the cap selects.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/fp4_internal.hpp"
#include "kernels/gelu_erf.hpp"
#include "kernels/reference.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/fp4.hpp"
#include "mantissa/formats/lookup.hpp"
#include "mantissa/formats/scaled_copy.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace {

namespace cpu = mantissa::cpu;
namespace mf = mantissa::formats;
namespace mk = mantissa::kernels;

using mantissa::kernels::test::gelu_grad_ref;
using mantissa::kernels::test::gelu_ref;
using mantissa::kernels::test::kEps32;

// The caps to run: every level up to what the host has.
std::vector<cpu::Isa> caps() {
  std::vector<cpu::Isa> out;
  for (cpu::Isa isa : cpu::kAllIsas)
    if (isa <= cpu::detected_isa()) out.push_back(isa);
  return out;
}

// Sets a cap for one scope and restores the previous one.
struct Cap {
  explicit Cap(cpu::Isa isa) : before(cpu::max_isa()) { cpu::set_max_isa(isa); }
  ~Cap() { cpu::set_max_isa(before); }
  cpu::Isa before;
};

// A storage format by its definition: E exponent bits, M mantissa bits,
// bias; codes whose exponent field is all ones are inf/NaN except for
// e4m3fn (only mantissa all ones is NaN there).
struct Def {
  const char* name;
  int E, M, bias;
  bool fn;  // "finite": the top binade holds numbers
  int bits() const { return 1 + E + M; }
};
const Def kBf16{"bf16", 8, 7, 127, false};
const Def kE4m3{"e4m3fn", 4, 3, 7, true};
const Def kE5m2{"e5m2", 5, 2, 15, false};

struct Point {
  double value;
  uint32_t code;
};

// Non-negative finite values in code order (= value order).
std::vector<Point> positives(const Def& d) {
  std::vector<Point> out;
  const int emax = (1 << d.E) - 1;
  for (int e = 0; e <= emax; ++e)
    for (int m = 0; m < (1 << d.M); ++m) {
      if (!d.fn && e == emax) continue;
      if (d.fn && e == emax && m == (1 << d.M) - 1) continue;
      const double frac = e == 0 ? m / std::ldexp(1.0, d.M) : 1.0 + m / std::ldexp(1.0, d.M);
      out.push_back({std::ldexp(frac, (e == 0 ? 1 : e) - d.bias), static_cast<uint32_t>(e << d.M | m)});
    }
  return out;
}

uint32_t sign_bit(const Def& d) { return 1u << (d.bits() - 1); }

// Round to nearest, ties to the even code, for |x| <= the largest value.
Point round_ref(const std::vector<Point>& pos, const Def& d, double x) {
  const double a = std::fabs(x);
  auto hi = std::lower_bound(pos.begin(), pos.end(), a, [](const Point& p, double v) { return p.value < v; });
  Point r = *hi;
  if (hi != pos.begin() && hi->value != a) {
    const Point lo = *(hi - 1);
    const double dl = a - lo.value, dh = hi->value - a;
    if (dl < dh || (dl == dh && (lo.code & 1u) == 0)) r = lo;
  }
  if (std::signbit(x)) {
    r.value = -r.value;
    r.code |= sign_bit(d);
  }
  return r;
}

// Inputs within the format's range: log-uniform magnitudes from below the
// smallest subnormal to the largest value, every exact midpoint between
// neighbours around 1 and in the subnormals, zeros and the extremes.
std::vector<float> inputs(const std::vector<Point>& pos, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double lo = std::log2(pos[1].value) - 2, hi = std::log2(pos.back().value);
  std::uniform_real_distribution<double> e(lo, hi), u(0, 1);
  std::vector<float> x;
  for (int i = 0; i < 700; ++i) {
    const float v = static_cast<float>(std::exp2(e(rng)));
    x.push_back(std::min(v, static_cast<float>(pos.back().value)) * (u(rng) < 0.5 ? -1.0f : 1.0f));
  }
  for (size_t i = 0; i + 1 < pos.size(); i += std::max<size_t>(1, pos.size() / 300)) {
    const float mid = static_cast<float>((pos[i].value + pos[i + 1].value) / 2);
    x.push_back(i % 2 ? -mid : mid);
  }
  for (float v : {0.0f, -0.0f, static_cast<float>(pos.back().value), -static_cast<float>(pos.back().value),
                  static_cast<float>(pos[1].value)})
    x.push_back(v);
  x.resize(x.size() | 1);  // an odd length: the vector kernels' masked tail runs
  return x;
}

uint32_t read_code(const std::vector<uint8_t>& buf, int bytes, size_t i) {
  uint32_t c = 0;
  for (int b = 0; b < bytes; ++b) c |= uint32_t{buf[i * bytes + b]} << (8 * b);
  return c;
}

// The reported implementation's ISA prefix must fit the cap.
// Every vector tier has an implementation of each family, so any cap above
// scalar must run a vector one.
void expect_fits(const std::string& name, cpu::Isa cap) {
  const bool avx512 = name.rfind("avx512", 0) == 0;
  const bool avx2 = name.rfind("avx2", 0) == 0;
  EXPECT_EQ(avx512 || avx2, cap >= cpu::Isa::avx2) << name << " under " << cpu::isa_name(cap);
  if (avx512) {
    EXPECT_GE(cap, cpu::Isa::avx512) << name;
  }
  if (name.rfind("avx512_bf16", 0) == 0) {
    EXPECT_GE(cap, cpu::Isa::avx512_bf16) << name;
  }
}

TEST(BackendOps, QuantizeAndFakeQuantizeMatchFloat64Rounding) {
  for (const Def& d : {kBf16, kE4m3, kE5m2}) {
    const auto pos = positives(d);
    const auto x = inputs(pos, 11);
    const mf::Format& f = mf::preset(d.name);
    const int bytes = f.storage_bytes();
    for (cpu::Isa isa : caps()) {
      Cap cap(isa);
      std::vector<uint8_t> codes(x.size() * bytes);
      std::vector<float> fake(x.size());
      mf::quantize(f, x.data(), codes.data(), x.size());
      expect_fits(mf::last_kernel(), isa);
      mf::fake_quantize(f, x.data(), fake.data(), x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        const Point r = round_ref(pos, d, x[i]);
        ASSERT_EQ(read_code(codes, bytes, i), r.code) << d.name << " " << cpu::isa_name(isa) << " x=" << x[i];
        ASSERT_EQ(std::bit_cast<uint32_t>(fake[i]), std::bit_cast<uint32_t>(static_cast<float>(r.value)))
            << d.name << " " << cpu::isa_name(isa) << " x=" << x[i];
      }
    }
  }
}

TEST(BackendOps, Fp32StorageIsTheIdentity) {
  const auto x = inputs(positives(kBf16), 5);
  for (cpu::Isa isa : caps()) {
    Cap cap(isa);
    std::vector<float> codes(x.size()), back(x.size());
    mf::quantize(mf::preset("fp32"), x.data(), codes.data(), x.size());
    mf::dequantize(mf::preset("fp32"), codes.data(), back.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(x[i])) << cpu::isa_name(isa);
  }
}

TEST(BackendOps, DequantizeGivesEveryFiniteCodesValue) {
  for (const Def& d : {kBf16, kE4m3, kE5m2}) {
    std::vector<Point> all;
    for (const Point& p : positives(d)) {
      all.push_back(p);
      all.push_back({-p.value, p.code | sign_bit(d)});
    }
    const mf::Format& f = mf::preset(d.name);
    const int bytes = f.storage_bytes();
    std::vector<uint8_t> codes(all.size() * bytes);
    for (size_t i = 0; i < all.size(); ++i)
      for (int b = 0; b < bytes; ++b) codes[i * bytes + b] = static_cast<uint8_t>(all[i].code >> (8 * b));
    for (cpu::Isa isa : caps()) {
      Cap cap(isa);
      std::vector<float> out(all.size());
      mf::dequantize(f, codes.data(), out.data(), all.size());
      expect_fits(mf::last_kernel(), isa);
      for (size_t i = 0; i < all.size(); ++i)
        ASSERT_EQ(static_cast<double>(out[i]), all[i].value)
            << d.name << " " << cpu::isa_name(isa) << " code " << all[i].code;
    }
  }
}

// 1-byte codes -> bf16 bits (lookup16) or fp32 (lookup16_widen), with no
// fold, a per-element fold and a per-group fold (powers of two).
TEST(BackendOps, LookupDecodesOneByteCodesTimesTheFold) {
  for (const Def& d : {kE4m3, kE5m2}) {
    std::vector<double> value(256, std::numeric_limits<double>::quiet_NaN());
    for (const Point& p : positives(d)) {
      value[p.code] = p.value;
      value[p.code | 0x80u] = -p.value;
    }
    mf::Table16 table{};
    for (int c = 0; c < 256; ++c)
      table[c] = std::isnan(value[c]) ? uint16_t{0x7FC0}
                                      : static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(value[c])) >> 16);
    const size_t n = 1000 + 37, group = 32;
    std::mt19937_64 rng(7);
    std::vector<uint8_t> codes(n);
    for (auto& c : codes) c = static_cast<uint8_t>(rng());
    std::vector<float> each(n), per_group(n / group + 1);
    for (size_t i = 0; i < n; ++i) each[i] = std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);
    for (auto& g : per_group) g = std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);
    for (cpu::Isa isa : caps()) {
      Cap cap(isa);
      expect_fits(mf::lookup_implementation(), isa);
      for (int mode = 0; mode < 3; ++mode) {
        const float* fold = mode == 0 ? nullptr : mode == 1 ? each.data() : per_group.data();
        const size_t g = mode == 2 ? group : 1;
        std::vector<uint16_t> half(n);
        std::vector<float> wide(n);
        mf::lookup16(table, codes.data(), half.data(), n, fold, g);
        mf::lookup16_widen(table, codes.data(), wide.data(), n, fold, g);
        for (size_t i = 0; i < n; ++i) {
          const double want = value[codes[i]] * (fold ? fold[i / g] : 1.0);
          const float got_half = std::bit_cast<float>(uint32_t{half[i]} << 16);
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got_half) && std::isnan(wide[i])) << d.name << " code " << int{codes[i]};
            continue;
          }
          ASSERT_EQ(static_cast<double>(got_half), want) << d.name << " " << cpu::isa_name(isa) << " mode " << mode;
          ASSERT_EQ(static_cast<double>(wide[i]), want) << d.name << " " << cpu::isa_name(isa) << " mode " << mode;
        }
      }
    }
  }
}

// lookup16 against direct indexing of random tables, on every length
// around the 32-lane steps.
TEST(BackendOps, LookupMatchesDirectIndexingOnEveryPathAndLength) {
  std::mt19937 rng(7);
  mf::Table16 table;
  for (auto& v : table) v = static_cast<uint16_t>(rng());
  std::vector<uint8_t> codes(4099);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i < 256 ? i : rng());
  for (cpu::Isa isa : caps()) {
    Cap cap(isa);
    for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{63}, size_t{256}, size_t{4099}}) {
      std::vector<uint16_t> out(n + 1, 0xABCD);
      mf::lookup16(table, codes.data(), out.data(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], table[codes[i]]) << "isa " << cpu::isa_name(isa) << " n " << n << " i " << i;
      EXPECT_EQ(out[n], 0xABCD) << "wrote past the end, n " << n;
    }
  }
}

// With a fold, each entry (bf16 bits) times fold[i / group], top 16 bits of
// the fp32 product; groups of 1 (per element), 32, 128 and an odd 7, folds
// that keep values normal and ones that take them below bf16's normal range.
TEST(BackendOps, LookupFoldMultipliesEachEntryByItsGroupsFactor) {
  std::mt19937 rng(9);
  mf::Table16 table;
  for (size_t c = 0; c < table.size(); ++c)  // bf16 values of all signs, zero, NaN
    table[c] = static_cast<uint16_t>(c == 0 ? 0 : c == 1 ? 0x7FC0 : (rng() & 0x83FF) | 0x3C00);
  std::vector<uint8_t> codes(1000);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i < 256 ? i : rng());
  std::vector<float> fold(codes.size());
  for (size_t i = 0; i < fold.size(); ++i) fold[i] = std::ldexp(1.0f, static_cast<int>(rng() % 255) - 127);
  for (cpu::Isa isa : caps()) {
    Cap cap(isa);
    for (size_t group : {size_t{1}, size_t{7}, size_t{32}, size_t{128}})
      for (size_t n : {size_t{0}, size_t{5}, size_t{33}, size_t{300}, size_t{1000}}) {
        std::vector<uint16_t> out(n + 1, 0xABCD);
        mf::lookup16(table, codes.data(), out.data(), n, fold.data(), group);
        for (size_t i = 0; i < n; ++i) {
          const float v = std::bit_cast<float>(static_cast<uint32_t>(table[codes[i]]) << 16) * fold[i / group];
          ASSERT_EQ(out[i], static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16))
              << cpu::isa_name(isa) << " group " << group << " n " << n << " i " << i;
        }
        EXPECT_EQ(out[n], 0xABCD) << "wrote past the end, n " << n;
      }
  }
}

// FP4 block casts (row, column and 2-D tiles, nearest-even and stochastic)
// and their decode: each cap's path gives the scalar reference's codes,
// scales and decoded bf16, and the decode of the codes gives the cast's.
TEST(BackendOps, Fp4CastAndDecodeMatchTheReference) {
  const int64_t rows = 48, cols = 80;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> e(-30, 30), u(0, 1);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (auto& v : x) v = static_cast<float>((u(rng) < 0.5 ? -1 : 1) * std::exp2(e(rng)));
  for (auto scale : {mf::Fp4Scale::nvfp4, mf::Fp4Scale::mxfp4})
    for (auto round : {mf::Fp4Rounding::nearest_even, mf::Fp4Rounding::stochastic})
      for (auto [tr, tc] : std::vector<std::pair<int64_t, int64_t>>{{1, 16}, {32, 1}, {16, 32}}) {
        const mf::Fp4Spec s{.scale = scale, .tile_rows = tr, .tile_cols = tc, .rounding = round, .seed = 2};
        const size_t tiles = static_cast<size_t>(mf::fp4_tile_count(s, rows, cols));
        std::vector<uint8_t> want_codes(x.size()), want_scales(tiles);
        std::vector<uint16_t> want_dec(x.size());
        mf::fp4_cast_reference(s, x.data(), rows, cols, want_codes.data(), want_scales.data(), want_dec.data());
        for (cpu::Isa isa : caps()) {
          Cap cap(isa);
          expect_fits(mf::detail::fp4_implementation(), isa);
          std::vector<uint8_t> codes(x.size()), scales(tiles);
          std::vector<uint16_t> dec(x.size()), again(x.size());
          mf::fp4_cast(s, x.data(), rows, cols, codes.data(), scales.data(), dec.data());
          mf::fp4_decode(s, codes.data(), scales.data(), rows, cols, again.data());
          EXPECT_EQ(codes, want_codes) << cpu::isa_name(isa) << " tile " << tr << "x" << tc;
          EXPECT_EQ(scales, want_scales) << cpu::isa_name(isa) << " tile " << tr << "x" << tc;
          EXPECT_EQ(dec, want_dec) << cpu::isa_name(isa) << " tile " << tr << "x" << tc;
          EXPECT_EQ(again, want_dec) << cpu::isa_name(isa) << " tile " << tr << "x" << tc;
        }
      }
}

// scaled_copy: out = x mult (the fp32 product, which float64 gives exactly
// before one rounding), amax of |x|, whether anything is inf/NaN and how many
// finite products exceed the limit; lengths around the 16-lane tails.
TEST(BackendOps, ScaledCopyMatchesFloat64) {
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
    for (cpu::Isa isa : caps()) {
      Cap cap(isa);
      expect_fits(mf::scaled_copy_implementation(), isa);
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
        const char* where = cpu::isa_name(isa);
        EXPECT_EQ(static_cast<double>(t.amax), amax) << where << " n " << n << " variant " << variant;
        EXPECT_EQ(t.nonfinite, bad) << where << " n " << n;
        EXPECT_EQ(t.beyond, beyond) << where << " n " << n;
        for (size_t i = 0; i < n; ++i) {
          if (!std::isnan(in[i])) {
            ASSERT_EQ(static_cast<double>(out[i]), static_cast<double>(static_cast<float>(double{in[i]} * mult)))
                << where << " i " << i;
          }
        }
        EXPECT_EQ(out[n], 7.0f) << "wrote past the end";
        EXPECT_EQ(mf::scaled_copy(in.data(), nullptr, n, mult, limit).beyond, beyond);
      }
    }
  }
}

// GELU forward and backward with x in fp32, bf16 and 1-byte codes (x =
// table[code] x fold), over [-12, 12] plus far-left inputs and a NaN that
// must come out NaN; the AVX-512 and AVX2 kernels (reciprocal estimate +
// Newton step, 2u clamped to [-80, 80]) and the generic loops (division,
// clamped exp).
TEST(BackendOps, GeluOnEveryStorageMatchesFloat64) {
  constexpr int64_t kN = 1037;
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<float> ux(-12.0f, 12.0f), ug(-1.0f, 1.0f);
  std::vector<float> x(kN), g(kN);
  for (auto& v : x) v = ux(rng);
  for (auto& v : g) v = ug(rng);
  x[0] = -200.0f;
  x[1] = 30.0f;
  x[2] = std::numeric_limits<float>::quiet_NaN();
  // bf16 storage: x rounded to bf16 by truncation (any bf16 value will do).
  std::vector<uint16_t> x16(kN);
  for (int64_t i = 0; i < kN; ++i) x16[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(x[i]) >> 16);
  // 1-byte storage: e4m3fn codes with a fold of 1/32 (|x| up to 14).
  const auto pos = positives(kE4m3);
  mf::Table16 table{};
  std::vector<double> value(256, std::numeric_limits<double>::quiet_NaN());
  for (const Point& p : pos) {
    value[p.code] = p.value;
    value[p.code | 0x80u] = -p.value;
  }
  for (int c = 0; c < 256; ++c)
    table[c] = std::isnan(value[c]) ? uint16_t{0x7FC0}
                                    : static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(value[c])) >> 16);
  const float fold = 0x1p-5f;
  std::vector<uint8_t> codes(kN);
  for (int64_t i = 0; i < kN; ++i) codes[i] = static_cast<uint8_t>(rng());
  for (cpu::Isa isa : caps()) {
    Cap cap(isa);
    expect_fits(mk::gelu_implementation(), isa);
    const char* where = cpu::isa_name(isa);
    std::vector<float> y(kN), dx(kN, 0.0f), dx16(kN, 0.0f), dx8(kN, 0.0f);
    mk::gelu_forward(y.data(), x.data(), kN);
    mk::gelu_backward(dx.data(), x.data(), g.data(), kN);
    mk::gelu_backward_bf16x(dx16.data(), x16.data(), g.data(), kN);
    mk::gelu_backward_codes(dx8.data(), codes.data(), table, fold, g.data(), kN, true);
    EXPECT_TRUE(std::isnan(y[2]) && std::isnan(dx[2]) && std::isnan(dx16[2])) << where;
    for (int64_t i = 0; i < kN; ++i) {
      const double xb = std::bit_cast<float>(uint32_t{x16[i]} << 16), x8 = value[codes[i]] * fold;
      const double tol_g = 16 * kEps32 * (1 + std::abs(g[i])) + 1e-6;
      if (!std::isnan(x8)) {
        const double want8 = gelu_grad_ref(x8) * g[i];
        ASSERT_NEAR(dx8[i], want8, 16 * kEps32 * std::abs(want8) + tol_g) << where << " code " << int{codes[i]};
      }
      if (i == 2) continue;
      const double fwd = gelu_ref(x[i]), bwd = gelu_grad_ref(x[i]) * g[i], bwd16 = gelu_grad_ref(xb) * g[i];
      ASSERT_NEAR(y[i], fwd, 8 * kEps32 * std::abs(fwd) + 2e-7) << where << " x=" << x[i];
      ASSERT_NEAR(dx[i], bwd, 16 * kEps32 * std::abs(bwd) + tol_g) << where << " x=" << x[i];
      ASSERT_NEAR(dx16[i], bwd16, 16 * kEps32 * std::abs(bwd16) + tol_g) << where << " x=" << xb;
    }
  }
}

// The exact GELU x Phi(x) and its slope Phi(x) + x phi(x) in float64.
double gelu_erf64(double x) { return x * 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double gelu_erf_slope64(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

// The spacing of fp32 values at |v| (subnormal spacing below 2^-126).
double ulp32(double v) {
  const double a = std::abs(v);
  return a < 0x1p-126 ? 0x1p-149 : std::ldexp(1.0, std::ilogb(a) - 23);
}

// Every fp32 in [-16, 16] at a stride of 4099 codes (540 000 inputs, the
// tails included), a grid of step 2^-12, and the extremes.
std::vector<float> erf_sweep() {
  std::vector<float> x;
  for (uint32_t c = 0; c <= std::bit_cast<uint32_t>(16.0f); c += 4099) {
    x.push_back(std::bit_cast<float>(c));
    x.push_back(-std::bit_cast<float>(c));
  }
  for (int i = -16 * 4096; i <= 16 * 4096; ++i) x.push_back(static_cast<float>(i) * 0x1p-12f);
  for (float v : {-1e30f, 1e30f, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min()})
    x.push_back(v);
  x.resize(x.size() | 1);  // an odd length: the masked tails run
  return x;
}

// The exact GELU: every instruction set gives the scalar reference's bits
// (gelu_erf.hpp) forward and backward, accumulating and not, and the
// reference is within 6 fp32 ulps of float64 erfc. The slope's error is
// bounded by ulps of its two terms' magnitudes Phi(x) and |x| phi(x) (it
// crosses zero near x = -0.75, where they cancel).
TEST(BackendOps, GeluErfIsTheSameBitsOnEveryIsaAndWithinUlpsOfFloat64) {
  const std::vector<float> x = erf_sweep();
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> g(x.size()), base(x.size());
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> ug(-1.0f, 1.0f);
  for (size_t i = 0; i < x.size(); ++i) g[i] = ug(rng), base[i] = ug(rng);
  // The scalar cap runs the reference's loop (gelu_erf.hpp); every element of a sample is its bits.
  std::vector<float> ref_y(x.size()), ref_slope(x.size(), 0.0f);
  const std::vector<float> ones(x.size(), 1.0f);
  {
    Cap cap(cpu::Isa::scalar);
    mk::gelu_forward(ref_y.data(), x.data(), n, 1.0f, mk::GeluForm::erf);
    mk::gelu_backward(ref_slope.data(), x.data(), ones.data(), n, 1.0f, mk::GeluForm::erf);
  }
  for (size_t i = 0; i < x.size(); i += 97) {
    ASSERT_EQ(std::bit_cast<uint32_t>(ref_y[i]), std::bit_cast<uint32_t>(mk::gelu_erf_ref(x[i]))) << "x=" << x[i];
    ASSERT_EQ(std::bit_cast<uint32_t>(ref_slope[i]), std::bit_cast<uint32_t>(0.0f + mk::gelu_erf_slope_ref(x[i])))
        << "x=" << x[i];
  }
  double worst_fwd = 0, worst_slope = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    if (!std::isfinite(v)) continue;
    const double f = gelu_erf64(v), s = gelu_erf_slope64(v);
    const double terms = 0.5 * std::erfc(-v / std::sqrt(2.0)) + std::abs(v) * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    const double fwd_ulps = std::abs(ref_y[i] - f) / ulp32(f), slope_ulps = std::abs(ref_slope[i] - s) / ulp32(terms);
    worst_fwd = std::max(worst_fwd, fwd_ulps);
    worst_slope = std::max(worst_slope, slope_ulps);
    ASSERT_LE(fwd_ulps, 6.0) << "x=" << v << " got " << ref_y[i] << " want " << f;
    ASSERT_LE(slope_ulps, 6.0) << "x=" << v << " got " << ref_slope[i] << " want " << s;
  }
  std::printf("erf GELU: worst %.2f ulps forward, %.2f ulps of the terms backward over %zu inputs\n", worst_fwd,
              worst_slope, x.size());
  EXPECT_EQ(mk::gelu_erf_ref(-1e30f), 0.0f);
  EXPECT_EQ(mk::gelu_erf_ref(1e30f), 1e30f);
  EXPECT_EQ(mk::gelu_erf_slope_ref(-1e30f), 0.0f);
  EXPECT_EQ(mk::gelu_erf_slope_ref(1e30f), 1.0f);

  std::vector<float> want_y(x.size()), want_acc(x.size()), want_into(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    want_y[i] = 0.5f * ref_y[i];
    want_acc[i] = base[i] + ref_slope[i] * (0.5f * g[i]);
    want_into[i] = 0.0f + ref_slope[i] * (0.5f * g[i]);
  }
  auto same_bits = [&](const std::vector<float>& got, const std::vector<float>& want, const char* what, cpu::Isa isa) {
    for (size_t i = 0; i < got.size(); ++i)
      if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]) && !(std::isnan(got[i]) && std::isnan(want[i])))
        FAIL() << what << " under " << cpu::isa_name(isa) << " x=" << x[i] << ": " << got[i] << " not " << want[i];
  };
  for (cpu::Isa isa : caps()) {
    Cap cap(isa);
    const std::string name = mk::gelu_implementation(mk::GeluForm::erf);
    expect_fits(name, isa);
    EXPECT_NE(name.find("gelu_erf"), std::string::npos) << name;
    std::vector<float> y(x.size()), acc = base, into(x.size(), 7.0f);
    mk::gelu_forward(y.data(), x.data(), n, 0.5f, mk::GeluForm::erf);
    mk::gelu_backward(acc.data(), x.data(), g.data(), n, 0.5f, mk::GeluForm::erf);
    mk::gelu_backward_into(into.data(), x.data(), g.data(), n, 0.5f, mk::GeluForm::erf);
    same_bits(y, want_y, "forward", isa);
    same_bits(acc, want_acc, "backward +=", isa);
    same_bits(into, want_into, "backward =", isa);
    const float nan = std::numeric_limits<float>::quiet_NaN(), one = 1.0f;
    float ynan = 0, dnan = 0;
    mk::gelu_forward(&ynan, &nan, 1, 1.0f, mk::GeluForm::erf);
    mk::gelu_backward(&dnan, &nan, &one, 1, 1.0f, mk::GeluForm::erf);
    EXPECT_TRUE(std::isnan(ynan) && std::isnan(dnan)) << cpu::isa_name(isa);
  }
}

// The erf form on bf16 and 1-byte saved inputs: the fp32 kernel's bits on
// the widened values.
TEST(BackendOps, GeluErfBackwardOnCompactInputsIsTheWidenedFp32) {
  constexpr int64_t kN = 1037;
  std::mt19937_64 rng(10);
  std::uniform_real_distribution<float> ux(-14.0f, 14.0f), ug(-1.0f, 1.0f);
  std::vector<uint16_t> x16(kN);
  std::vector<uint8_t> codes(kN);
  std::vector<float> g(kN), wide16(kN), wide8(kN);
  mf::Table16 table{};
  for (int c = 0; c < 256; ++c) table[c] = static_cast<uint16_t>(0x3C00u + c);  // bf16 values in [2^-7, 2^-6 * 3) and so on
  const float fold = 0x1p4f;
  for (int64_t i = 0; i < kN; ++i) {
    x16[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(ux(rng)) >> 16);
    wide16[i] = std::bit_cast<float>(uint32_t{x16[i]} << 16);
    codes[i] = static_cast<uint8_t>(rng());
    wide8[i] = std::bit_cast<float>(uint32_t{table[codes[i]]} << 16) * fold;
    g[i] = ug(rng);
  }
  for (cpu::Isa isa : caps()) {
    Cap cap(isa);
    std::vector<float> want16(kN, 0.0f), want8(kN, 0.0f), got16(kN, 0.0f), got8(kN, 0.0f);
    mk::gelu_backward(want16.data(), wide16.data(), g.data(), kN, 1.0f, mk::GeluForm::erf);
    mk::gelu_backward(want8.data(), wide8.data(), g.data(), kN, 1.0f, mk::GeluForm::erf);
    mk::gelu_backward_bf16x(got16.data(), x16.data(), g.data(), kN, 1.0f, mk::GeluForm::erf);
    mk::gelu_backward_codes(got8.data(), codes.data(), table, fold, g.data(), kN, true, 1.0f, mk::GeluForm::erf);
    for (int64_t i = 0; i < kN; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got16[i]), std::bit_cast<uint32_t>(want16[i])) << cpu::isa_name(isa) << " i=" << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(got8[i]), std::bit_cast<uint32_t>(want8[i])) << cpu::isa_name(isa) << " i=" << i;
      ASSERT_NEAR(got16[i], gelu_erf_slope64(wide16[i]) * g[i], 1e-6) << "x=" << wide16[i];
    }
  }
}

}  // namespace

