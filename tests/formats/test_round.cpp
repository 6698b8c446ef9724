// Rounding of the scalar reference encoder against an independent model: the
// format's finite values are enumerated from (E, M, bias, reserved codes) as
// exact dyadic rationals, the neighbours of an input are found by exact
// comparison, and the mode picks one of them. No code is shared with
// src/formats/round.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mantissa/formats/round.hpp"

namespace mf = mantissa::formats;

namespace {

// sig * 2^exp, exact. sig < 2^62.
struct Dyadic {
  uint64_t sig = 0;
  int exp = 0;
  bool odd = false;  // parity of the value's significand within its binade
};

Dyadic from_double(double x) {  // x >= 0, finite
  if (x == 0) return {0, 0};
  int e = 0;
  const double fr = std::frexp(x, &e);  // x = fr * 2^e, fr in [0.5, 1)
  return {static_cast<uint64_t>(std::ldexp(fr, 53)), e - 53};
}

double to_double(const Dyadic& d) { return std::ldexp(static_cast<double>(d.sig), d.exp); }

int compare(const Dyadic& a, const Dyadic& b) {
  if (a.sig == 0 || b.sig == 0) return (a.sig != 0) - (b.sig != 0);
  const int la = a.exp + 64 - __builtin_clzll(a.sig), lb = b.exp + 64 - __builtin_clzll(b.sig);
  if (la != lb) return la < lb ? -1 : 1;
  // Same binade: align both to 63 significant bits.
  const uint64_t na = a.sig << (__builtin_clzll(a.sig) - 1), nb = b.sig << (__builtin_clzll(b.sig) - 1);
  return na < nb ? -1 : na > nb ? 1 : 0;
}

Dyadic midpoint(const Dyadic& a, const Dyadic& b) {
  if (a.sig == 0) return {b.sig, b.exp - 1};
  const int e = std::min(a.exp, b.exp);
  return {(a.sig << (a.exp - e)) + (b.sig << (b.exp - e)), e - 1};
}

// The format's non-negative finite values in increasing order, built from the
// descriptor fields alone, plus the "next" value one step above max that
// round-to-nearest measures overflow against.
struct Model {
  std::vector<Dyadic> values;
  Dyadic beyond;
  bool has_zero = true;
};

Model build_model(const mf::Format& f) {
  Model m;
  if (f.kind == mf::Kind::integer) {
    for (uint64_t i = 0; i <= 128; ++i) m.values.push_back({i, 0, (i & 1) != 0});
  } else if (f.kind == mf::Kind::exponent) {
    m.has_zero = false;
    for (int field = 0; field <= 255; ++field) m.values.push_back({1, field - f.bias, true});
  } else {
    const int man = f.mantissa_bits;
    const uint64_t top = (uint64_t{1} << f.exponent_bits) - 1, per = uint64_t{1} << man;
    const bool top_reserved = f.has_inf || f.nan == mf::NanEncoding::ieee;
    m.values.push_back({0, 0, false});
    if (f.subnormals)
      for (uint64_t j = 1; j < per; ++j) m.values.push_back({j, 1 - f.bias - man, (j & 1) != 0});
    for (uint64_t field = 1; field <= top + 1; ++field) {
      for (uint64_t j = 0; j < per; ++j) {
        const bool odd = man == 0 ? true : (j & 1) != 0;
        m.values.push_back({per + j, static_cast<int>(field) - f.bias - man, odd});
      }
    }
    // Keep finite codes only, plus one value past the end.
    size_t finite = 1 + (f.subnormals ? per - 1 : 0) + top * per;
    if (top_reserved) finite -= per;
    else if (f.nan == mf::NanEncoding::fn) finite -= 1;
    m.values.resize(finite + 1);
  }
  if (f.kind == mf::Kind::integer) m.values.resize(129);
  m.beyond = m.values.back();
  m.values.pop_back();
  return m;
}

enum class Outcome { value, overflow };
struct RefResult {
  Outcome outcome = Outcome::value;
  Dyadic v;
};

// Round |x| with mode `away_or_zero`-resolved semantics: up = toward larger magnitude.
RefResult reference_round_magnitude(const Model& m, const Dyadic& x, mf::Round mode_for_magnitude) {
  const auto& vals = m.values;
  const Dyadic& max = vals.back();
  if (compare(x, max) > 0 && mode_for_magnitude == mf::Round::toward_zero) return {Outcome::value, max};
  if (compare(x, m.beyond) >= 0) return {Outcome::overflow, {}};
  // First value >= x (the table extended by `beyond`).
  auto it = std::lower_bound(vals.begin(), vals.end(), x, [](const Dyadic& a, const Dyadic& b) {
    return compare(a, b) < 0;
  });
  const Dyadic hi = it == vals.end() ? m.beyond : *it;
  const bool hi_overflows = it == vals.end();
  if (compare(hi, x) == 0) return {Outcome::value, hi};
  if (it == vals.begin()) return {Outcome::value, hi};  // below the smallest value (e8m0: no zero)
  const Dyadic lo = *(it - 1);
  bool pick_hi = false;
  const int c = compare(x, midpoint(lo, hi));
  switch (mode_for_magnitude) {
    case mf::Round::nearest_even:
      if (c != 0) pick_hi = c > 0;
      else if (lo.odd != hi.odd) pick_hi = lo.odd;
      else pick_hi = lo.odd;  // both odd (M = 0): larger; both even (0 vs min normal): smaller
      break;
    case mf::Round::nearest_away: pick_hi = c >= 0; break;
    case mf::Round::up: pick_hi = true; break;  // away from zero in this helper
    default: pick_hi = false; break;
  }
  if (pick_hi && hi_overflows) return {Outcome::overflow, {}};
  return {Outcome::value, pick_hi ? hi : lo};
}

// The expected decoded result of encode(f, x, {mode}) for finite x.
double expected(const mf::Format& f, const Model& m, double x, mf::Round mode) {
  const bool neg = std::signbit(x);
  if (f.kind == mf::Kind::exponent && (neg || x == 0)) return std::numeric_limits<double>::quiet_NaN();
  mf::Round mag_mode = mode;  // translate up/down into away-from-zero / toward-zero
  if (mode == mf::Round::up) mag_mode = neg ? mf::Round::toward_zero : mf::Round::up;
  if (mode == mf::Round::down) mag_mode = neg ? mf::Round::up : mf::Round::toward_zero;
  const RefResult r = reference_round_magnitude(m, from_double(std::fabs(x)), mag_mode);
  double v = 0;
  if (r.outcome == Outcome::overflow) {
    if (f.has_inf) v = std::numeric_limits<double>::infinity();
    else if (f.nan != mf::NanEncoding::none) return std::numeric_limits<double>::quiet_NaN();
    else v = to_double(m.values.back());
  } else {
    v = to_double(r.v);
  }
  if (v == 0 && !f.negative_zero) return 0.0;
  return neg ? -v : v;
}

bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

std::vector<mf::Format> small_formats() {
  std::vector<mf::Format> out;
  for (const auto& f : mf::presets())
    if (f.total_bits() <= 16) out.push_back(f);
  for (const char* spec : {"e3m3", "e3m3:bias=4:nan=none", "e5m6:inf=0:nan=none:negzero=0:subnormals=0",
                           "e4m2:nan=fnuz", "e5m6:nan=fn", "e5m0:inf=0", "e2m2:nan=fn:subnormals=0"})
    out.push_back(mf::parse_format(spec));
  return out;
}

constexpr mf::Round kDeterministicModes[] = {mf::Round::nearest_even, mf::Round::nearest_away,
                                             mf::Round::toward_zero, mf::Round::up, mf::Round::down};

}  // namespace

TEST(Round, EveryCodeRoundTrips) {
  for (const auto& f : small_formats()) {
    SCOPED_TRACE(f.name);
    size_t nan_codes = 0;
    for (uint32_t code = 0; code < f.code_count(); ++code) {
      const double v = mf::decode(f, code);
      ASSERT_EQ(std::isnan(v), mf::is_nan_code(f, code)) << code;
      const uint32_t back = mf::encode(f, v);
      if (std::isnan(v)) {
        ++nan_codes;
        EXPECT_TRUE(mf::is_nan_code(f, back)) << code;
        continue;
      }
      const bool alias = (f.kind == mf::Kind::integer && code == 0x80) ||  // -128, outside [-127, 127]
                         (v == 0 && code != 0 && (!f.negative_zero || !f.subnormals));
      if (!alias) {
        EXPECT_EQ(back, code) << "code " << code << " value " << v;
      } else if (v == 0) {
        EXPECT_EQ(mf::decode(f, back), 0.0) << code;
      } else {
        EXPECT_EQ(back, 0x81u);  // int8's -128 saturates to -127
      }
      EXPECT_EQ(mf::encode(f, static_cast<float>(v)), back) << code;  // every value here is a float too
      EXPECT_EQ(mf::decode_f32(f, code), static_cast<float>(v));
    }
    const size_t expect_nans = f.nan == mf::NanEncoding::fnuz ? 1
                               : f.nan == mf::NanEncoding::fn ? (f.is_signed ? 2 : 1)
                                                              : 0;
    if (f.nan != mf::NanEncoding::ieee) {
      EXPECT_EQ(nan_codes, expect_nans);
    }
  }
}

TEST(Round, NeighboursAndMidpointsMatchExactReference) {
  for (const auto& f : small_formats()) {
    SCOPED_TRACE(f.name);
    const Model m = build_model(f);
    ASSERT_EQ(to_double(m.values.back()), f.max());
    std::vector<double> inputs;
    // x, and its neighbours one fp32 ulp and (for the small formats and every
    // 8th pair of the large ones, to keep the test fast) one fp64 ulp either side.
    auto add = [&](double x, bool fp64_neighbours) {
      inputs.push_back(x);
      if (fp64_neighbours) {
        inputs.push_back(std::nextafter(x, 0.0));
        inputs.push_back(std::nextafter(x, INFINITY));
      }
      const float xf = static_cast<float>(x);
      if (static_cast<double>(xf) == x && xf != 0) {
        inputs.push_back(std::nextafterf(xf, 0.0f));
        inputs.push_back(std::nextafterf(xf, INFINITY));
      }
    };
    for (size_t i = 0; i < m.values.size(); ++i) {
      const Dyadic hi = i + 1 < m.values.size() ? m.values[i + 1] : m.beyond;
      const bool small = m.values.size() < 4096;
      inputs.push_back(to_double(m.values[i]));
      add(to_double(midpoint(m.values[i], hi)), small || i % 8 == 0);
      if (small) {  // off-midpoint points; the large formats get enough from the ulps
        add(to_double(m.values[i]), true);
        inputs.push_back(to_double(midpoint(m.values[i], midpoint(m.values[i], hi))));
      }
    }
    add(to_double(m.beyond), true);
    add(to_double(m.beyond) * 4, true);
    add(std::ldexp(to_double(m.values[m.has_zero ? 1 : 0]), -3), true);  // deep underflow
    size_t checked = 0;
    for (const double mag : inputs) {
      if (!(mag > 0) || std::isinf(mag)) continue;
      for (const double x : {mag, -mag}) {
        for (const mf::Round mode : kDeterministicModes) {
          const mf::RoundOptions opt{.mode = mode};
          const double want = expected(f, m, x, mode);
          const uint32_t code = mf::encode(f, x, opt);
          ASSERT_TRUE(same(mf::decode(f, code), want))
              << "x=" << std::hexfloat << x << " mode=" << mf::round_name(mode) << " got " << mf::decode(f, code)
              << " want " << want;
          const float xf = static_cast<float>(x);
          if (static_cast<double>(xf) == x) {
            ASSERT_EQ(mf::encode(f, xf, opt), code) << std::hexfloat << x;
          }
          ++checked;
        }
      }
    }
    EXPECT_GT(checked, m.values.size() * 10);
  }
}

// ---- Stochastic rounding ----------------------------------------------------

TEST(Round, StochasticIsUnbiasedReproducibleAndOnlyUsesNeighbours) {
  const auto& bf16 = mf::preset("bf16");
  constexpr int kDraws = 200000;
  // Fractions of an ulp, including ones whose bits sit far below the random
  // bits' reach of a careless implementation (1/3 needs every bit).
  for (const double frac : {0.5, 0.25, 1.0 / 3.0, 0.01, 0.999, 1.0 / 1024}) {
    const double lo = 1.5, ulp = std::ldexp(1, -7), x = lo + frac * ulp;
    for (const double sx : {x, -x}) {
      SCOPED_TRACE(sx);
      mf::RoundOptions opt{.mode = mf::Round::stochastic, .random_bits = 24, .seed = 1234};
      double sum = 0;
      size_t ups = 0;
      for (int i = 0; i < kDraws; ++i) {
        const double v = mf::decode(bf16, mf::encode(bf16, sx, opt, static_cast<uint64_t>(i)));
        ASSERT_TRUE(std::fabs(v) == lo || std::fabs(v) == lo + ulp) << v;
        ASSERT_EQ(std::signbit(v), std::signbit(sx));
        ups += std::fabs(v) != lo;
        sum += v;
      }
      const double sigma = std::sqrt(frac * (1 - frac) / kDraws) * ulp;
      EXPECT_NEAR(sum / kDraws, sx, 6 * sigma + 1e-300);
      EXPECT_NEAR(static_cast<double>(ups) / kDraws, frac, 6 * std::sqrt(frac * (1 - frac) / kDraws));
    }
  }
  // Exact inputs never move; reproducible per (seed, index); seeds differ.
  mf::RoundOptions opt{.mode = mf::Round::stochastic, .seed = 7};
  const double x = 1.5 + std::ldexp(1, -9);
  size_t differ = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(mf::encode(bf16, 1.5, opt, i), 0x3fc0u);
    const uint32_t a = mf::encode(bf16, x, opt, i);
    EXPECT_EQ(a, mf::encode(bf16, static_cast<float>(x), opt, i));
    mf::RoundOptions other = opt;
    other.seed = 8;
    differ += a != mf::encode(bf16, x, other, i);
  }
  EXPECT_GT(differ, 200u);  // independent draws at p = 1/4 disagree ~37.5% of the time
  // With R random bits the probability is the remainder truncated to R bits:
  // 1 random bit can only express 0 and 1/2, so a 1/4-ulp remainder never rounds up.
  mf::RoundOptions one_bit{.mode = mf::Round::stochastic, .random_bits = 1, .seed = 3};
  for (uint64_t i = 0; i < 200; ++i) EXPECT_EQ(mf::encode(bf16, x, one_bit, i), 0x3fc0u);
  EXPECT_THROW(mf::encode(bf16, x, {.mode = mf::Round::stochastic, .random_bits = 0}), std::invalid_argument);
  EXPECT_THROW(mf::encode(bf16, x, {.mode = mf::Round::stochastic, .random_bits = 33}), std::invalid_argument);
}

TEST(Round, StochasticBitsAreUniform) {
  // Chi-square over 16 buckets of the top 4 bits, and the bit-count contract.
  constexpr int kN = 160000;
  int buckets[16] = {};
  for (uint64_t i = 0; i < kN; ++i) {
    const uint32_t r = mf::stochastic_bits(99, i, 12);
    ASSERT_LT(r, 4096u);
    ++buckets[r >> 8];
  }
  double chi2 = 0;
  for (int b : buckets) chi2 += (b - kN / 16.0) * (b - kN / 16.0) / (kN / 16.0);
  EXPECT_LT(chi2, 50.0);  // 15 degrees of freedom: p < 1e-5 beyond 50
  EXPECT_EQ(mf::stochastic_bits(5, 17, 32), mf::stochastic_bits(5, 17, 32));
  EXPECT_EQ(mf::stochastic_bits(5, 17, 8), mf::stochastic_bits(5, 17, 32) >> 24);
}

TEST(Round, ModeNamesRoundTrip) {
  for (const mf::Round r : {mf::Round::nearest_even, mf::Round::nearest_away, mf::Round::toward_zero, mf::Round::up,
                            mf::Round::down, mf::Round::stochastic})
    EXPECT_EQ(mf::parse_round(mf::round_name(r)), r);
  EXPECT_THROW(mf::parse_round("sideways"), std::invalid_argument);
}
