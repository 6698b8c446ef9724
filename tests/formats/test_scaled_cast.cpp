// formats::ScaledCast (the fused FP8 cast pass) against the reference
// encoder element by element: codes = encode(f, x * mult), decode = the
// table entry folded by its factor, totals recomputed in float64; on the
// vector path (fp16 route for e4m3fn/e5m2/e4m3fnuz, integer rounder for
// e5m2fnuz) and with the ISA capped to scalar, for per-element, per-group
// and per-span multipliers, saturating or not, with inf/NaN, subnormals and
// values beyond the format's max. Block casts (run_blocks) against run()
// with factors from each block's amax found directly; column_amax_bits
// against direct maxima.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/formats/scaled_cast.hpp"

namespace mf = mantissa::formats;

namespace {
struct IsaCap {
  explicit IsaCap(mantissa::cpu::Isa cap) { mantissa::cpu::set_max_isa(cap); }
  ~IsaCap() { mantissa::cpu::set_max_isa(mantissa::cpu::Isa::avx512_bf16_fp16); }
};

// code -> bf16 bits of the code's value (exact for 1-byte float formats).
mf::Table16 bf16_table(const mf::Format& f) {
  mf::Table16 t{};
  for (uint32_t c = 0; c < 256; ++c) t[c] = static_cast<uint16_t>(std::bit_cast<uint32_t>(mf::decode_f32(f, c)) >> 16);
  return t;
}

std::vector<float> inputs(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> e(-150, 20), u(0, 1);
  std::vector<float> x(n);
  for (auto& v : x) v = static_cast<float>((u(rng) < 0.5 ? -1 : 1) * std::exp2(e(rng)));
  x[1] = 0.0f;
  x[2] = -0.0f;
  x[3] = std::numeric_limits<float>::denorm_min();
  x[4] = -std::numeric_limits<float>::max();
  return x;
}

uint16_t folded(uint16_t bits, float fold) {
  const float v = std::bit_cast<float>(static_cast<uint32_t>(bits) << 16) * fold;
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
}
}  // namespace

TEST(ScaledCast, MatchesTheReferenceEncoderOnEveryRouteAndPath) {
  std::mt19937 rng(5);
  const size_t n_max = 1100;
  std::vector<float> mults(n_max), folds(n_max);
  for (size_t i = 0; i < n_max; ++i) {
    const int k = static_cast<int>(rng() % 60) - 20;
    mults[i] = std::ldexp(1.0f, -k);
    folds[i] = std::ldexp(1.0f, k);
  }
  for (const char* name : {"e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"}) {
    const mf::Format f = mf::parse_format(name);
    const mf::Table16 table = bf16_table(f);
    for (int special = 0; special < 3; ++special) {
      std::vector<float> x = inputs(n_max, 17 + special);
      if (special >= 1) x[700] = -std::numeric_limits<float>::infinity();
      if (special == 2) x[33] = std::numeric_limits<float>::quiet_NaN();
      for (bool saturate : {true, false}) {
        mf::RoundOptions opt;
        opt.saturate = saturate;
        for (mantissa::cpu::Isa isa : {mantissa::cpu::Isa::avx512_bf16_fp16, mantissa::cpu::Isa::avx2, mantissa::cpu::Isa::scalar}) {
          IsaCap cap(isa);
          const mf::ScaledCast cast(f, saturate, table);
          for (size_t group : {size_t{1}, size_t{7}, size_t{32}, size_t{128}, size_t{100000}})
            for (size_t n : {size_t{0}, size_t{17}, size_t{32}, size_t{45}, size_t{1100}})
              for (bool fold : {false, true}) {
                const std::string where = std::string(name) + " " + mantissa::cpu::isa_name(isa) + " group " +
                                          std::to_string(group) + " n " + std::to_string(n) +
                                          (saturate ? " saturating" : "") + (fold ? " fold" : "");
                std::vector<uint8_t> codes(n + 1, 0xEE);
                std::vector<uint16_t> dec(n + 1, 0xABCD);
                const mf::ScanTotals t =
                    cast.run(x.data(), n, mults.data(), group, codes.data(), dec.data(), fold ? folds.data() : nullptr);
                double amax = 0;
                bool bad = false;
                int64_t beyond = 0;
                for (size_t i = 0; i < n; ++i) {
                  const float v = x[i] * mults[i / group];
                  ASSERT_EQ(codes[i], mf::encode(f, v, opt)) << where << " i " << i << " x " << x[i];
                  const uint16_t want = fold ? folded(table[codes[i]], folds[i / group]) : table[codes[i]];
                  ASSERT_EQ(dec[i], want) << where << " i " << i;
                  const double a = std::fabs(static_cast<double>(x[i]));
                  if (!std::isnan(a)) amax = std::max(amax, a);
                  bad = bad || !std::isfinite(a);
                  beyond += std::isfinite(a) && std::fabs(static_cast<double>(v)) > f.max();
                }
                EXPECT_EQ(static_cast<double>(t.amax), amax) << where;
                EXPECT_EQ(t.nonfinite, bad) << where;
                EXPECT_EQ(t.beyond, beyond) << where;
                EXPECT_EQ(codes[n], 0xEE) << where << ": wrote past the end";
                EXPECT_EQ(dec[n], 0xABCD) << where << ": wrote past the end";
                std::vector<uint8_t> only(n + 1, 0xEE);  // without a decode: the same codes
                cast.run(x.data(), n, mults.data(), group, only.data(), nullptr);
                for (size_t i = 0; i < n; ++i) ASSERT_EQ(only[i], codes[i]) << where << " i " << i;
                std::vector<uint16_t> dec_only(n + 1, 0xABCD);  // without codes: the same decode and totals
                const mf::ScanTotals t2 = cast.run(x.data(), n, mults.data(), group, nullptr, dec_only.data(),
                                                   fold ? folds.data() : nullptr);
                for (size_t i = 0; i <= n; ++i) ASSERT_EQ(dec_only[i], dec[i]) << where << " decode only, i " << i;
                EXPECT_EQ(t2.amax, t.amax) << where;
                EXPECT_EQ(t2.beyond, t.beyond) << where;
              }
        }
      }
    }
  }
  EXPECT_THROW(mf::ScaledCast(mf::parse_format("bf16"), true, mf::Table16{}), std::invalid_argument);
  const mf::Format e4 = mf::parse_format("e4m3fn");
  const mf::Table16 t4 = bf16_table(e4);
  const mf::ScaledCast cast(e4, true, t4);
  const float one = 1.0f;
  EXPECT_THROW(cast.run(&one, 1, &one, 1, nullptr, nullptr), std::invalid_argument);  // nothing to write
}

// run_blocks against run() with each block's factors found directly: the
// block's amax, its exponent by the definition (floor(log2 amax) - offset,
// or the smallest E with amax x 2^-E <= max), 2^-E and 2^E; blocks of 32 and
// 128 (and odd sizes), rows not a multiple of the block or of 16 blocks,
// blocks of zeros, fp32 subnormals, inf and NaN.
TEST(ScaledCast, BlocksTakeTheirScaleFromTheirOwnAmax) {
  const mf::Format f = mf::parse_format("e4m3fn");
  const mf::Table16 table = bf16_table(f);
  mf::BlockRule mx;  // floor(log2 amax) - 8, zero blocks -127
  mx.offset = 8;
  mx.zero = -127;
  mf::BlockRule fit;  // smallest E with amax 2^-E <= 448 = 1.75 x 2^8
  fit.offset = 8;
  fit.round_up = true;
  fit.max_fraction = 0x600000;
  const auto direct = [&](const mf::BlockRule& r, const float* b, size_t len) {
    double amax = 0;
    bool bad = false;
    for (size_t i = 0; i < len; ++i) {
      bad = bad || !std::isfinite(b[i]);
      amax = std::max(amax, std::fabs(static_cast<double>(b[i])));
    }
    if (bad) return 0;
    if (amax == 0) return r.zero;
    int e = std::ilogb(amax) - 8;
    if (r.round_up) e = -300;
    while (r.round_up && std::ldexp(amax, -e) > 448) ++e;
    return std::clamp(e, -127, 127);
  };
  std::vector<float> x = inputs(3000, 23);
  for (size_t i = 64; i < 96; ++i) x[i] = 0.0f;                           // a zero block of 32
  for (size_t i = 128; i < 160; ++i) x[i] = std::ldexp(1.0f, -140) * (1.0f + static_cast<float>(i % 5));  // subnormals
  for (bool special : {false, true}) {
    if (special) {
      x[1000] = std::numeric_limits<float>::infinity();
      x[2100] = std::numeric_limits<float>::quiet_NaN();
    }
    for (mantissa::cpu::Isa isa : {mantissa::cpu::Isa::avx512_bf16_fp16, mantissa::cpu::Isa::avx2, mantissa::cpu::Isa::scalar}) {
      IsaCap cap(isa);
      const mf::ScaledCast cast(f, !special, table);
      for (const mf::BlockRule* rule : {&mx, &fit})
        for (size_t block : {size_t{32}, size_t{128}, size_t{48}, size_t{7}})
          for (size_t n : {size_t{32}, size_t{200}, size_t{513}, size_t{3000}}) {
            const std::string where = std::string(mantissa::cpu::isa_name(isa)) + (rule == &mx ? " mx" : " fit") + " block " +
                                      std::to_string(block) + " n " + std::to_string(n);
            const size_t blocks = (n + block - 1) / block;
            std::vector<int8_t> e(blocks + 1, 99);
            std::vector<uint8_t> codes(n), want_codes(n);
            std::vector<uint16_t> dec(n), want_dec(n);
            const mf::ScanTotals t = cast.run_blocks(x.data(), n, block, *rule, e.data(), codes.data(), dec.data());
            mf::ScanTotals want;
            for (size_t b = 0; b < blocks; ++b) {
              const size_t len = std::min(block, n - b * block);
              const int we = direct(*rule, x.data() + b * block, len);
              ASSERT_EQ(e[b], we) << where << " block " << b;
              const float mult = std::ldexp(1.0f, -we), fold = std::ldexp(1.0f, we);
              const mf::ScanTotals s = cast.run(x.data() + b * block, len, &mult, len, want_codes.data() + b * block,
                                                want_dec.data() + b * block, &fold);
              want.amax = std::max(want.amax, s.amax);
              want.nonfinite = want.nonfinite || s.nonfinite;
              want.beyond += s.beyond;
            }
            EXPECT_EQ(e[blocks], 99) << where << ": wrote past the exponents";
            EXPECT_EQ(codes, want_codes) << where;
            EXPECT_EQ(dec, want_dec) << where;
            EXPECT_EQ(t.amax, want.amax) << where;
            EXPECT_EQ(t.nonfinite, want.nonfinite) << where;
            EXPECT_EQ(t.beyond, want.beyond) << where;
          }
    }
  }
}

TEST(ScaledCast, ColumnAmaxBits) {
  std::vector<float> x = inputs(777, 3);
  x[40] = std::numeric_limits<float>::quiet_NaN();
  x[300] = -std::numeric_limits<float>::infinity();
  const auto bits = [](float v) { return std::bit_cast<uint32_t>(v) & 0x7FFFFFFFu; };
  for (mantissa::cpu::Isa isa : {mantissa::cpu::Isa::avx512_bf16_fp16, mantissa::cpu::Isa::avx2, mantissa::cpu::Isa::scalar}) {
    IsaCap cap(isa);
    std::vector<uint32_t> acc(x.size() + 1, 0x3F800000u);  // running max starts at 1.0
    mf::column_amax_bits(x.data(), x.size(), acc.data());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(acc[i], std::max(0x3F800000u, bits(x[i]))) << "i " << i;
    EXPECT_EQ(acc[x.size()], 0x3F800000u);
  }
}
