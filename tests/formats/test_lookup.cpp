// formats::lookup16 against direct indexing, on the vector path and with the
// ISA capped to scalar, for every length around the 32-lane tails.
#include <gtest/gtest.h>

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
