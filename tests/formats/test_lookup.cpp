// formats::lookup16 against direct indexing, on the vector path and with the
// ISA capped to scalar, for every length around the 32-lane tails.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/lookup.hpp"

namespace mf = mantissa::formats;

namespace {
struct IsaCap {
  explicit IsaCap(mf::Isa cap) { mf::set_max_isa(cap); }
  ~IsaCap() { mf::set_max_isa(mf::Isa::avx512_bf16_fp16); }
};
}  // namespace

TEST(Lookup16, MatchesDirectIndexingOnEveryPathAndLength) {
  std::mt19937 rng(7);
  mf::Table16 table;
  for (auto& v : table) v = static_cast<uint16_t>(rng());
  std::vector<uint8_t> codes(4099);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i < 256 ? i : rng());
  for (mf::Isa isa : {mf::Isa::avx512_bf16_fp16, mf::Isa::scalar}) {
    IsaCap cap(isa);
    for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{63}, size_t{256}, size_t{4099}}) {
      std::vector<uint16_t> out(n + 1, 0xABCD);
      mf::lookup16(table, codes.data(), out.data(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], table[codes[i]]) << "isa " << mf::isa_name(isa) << " n " << n << " i " << i;
      EXPECT_EQ(out[n], 0xABCD) << "wrote past the end, n " << n;
    }
  }
}

// With a fold, each entry (bf16 bits) times fold[i / group], top 16 bits of
// the fp32 product; groups of 1 (per element), 32, 128 and an odd 7, folds
// that keep values normal and ones that take them below bf16's normal range.
TEST(Lookup16, FoldMultipliesEachEntryByItsGroupsFactor) {
  std::mt19937 rng(9);
  mf::Table16 table;
  for (size_t c = 0; c < table.size(); ++c)  // bf16 values of all signs, zero, NaN
    table[c] = static_cast<uint16_t>(c == 0 ? 0 : c == 1 ? 0x7FC0 : (rng() & 0x83FF) | 0x3C00);
  std::vector<uint8_t> codes(1000);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i < 256 ? i : rng());
  std::vector<float> fold(codes.size());
  for (size_t i = 0; i < fold.size(); ++i) fold[i] = std::ldexp(1.0f, static_cast<int>(rng() % 255) - 127);
  for (mf::Isa isa : {mf::Isa::avx512_bf16_fp16, mf::Isa::scalar}) {
    IsaCap cap(isa);
    for (size_t group : {size_t{1}, size_t{7}, size_t{32}, size_t{128}})
      for (size_t n : {size_t{0}, size_t{5}, size_t{33}, size_t{300}, size_t{1000}}) {
        std::vector<uint16_t> out(n + 1, 0xABCD);
        mf::lookup16(table, codes.data(), out.data(), n, fold.data(), group);
        for (size_t i = 0; i < n; ++i) {
          const float v = std::bit_cast<float>(static_cast<uint32_t>(table[codes[i]]) << 16) * fold[i / group];
          ASSERT_EQ(out[i], static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16))
              << mf::isa_name(isa) << " group " << group << " n " << n << " i " << i;
        }
        EXPECT_EQ(out[n], 0xABCD) << "wrote past the end, n " << n;
      }
  }
}
