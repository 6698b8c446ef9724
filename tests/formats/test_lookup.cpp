// formats::lookup16 against direct indexing under every ISA cap the host
// has (each vector tier's path and the scalar one), for every length around
// the 32-lane tails.
#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/lookup.hpp"

namespace mf = mantissa::formats;
namespace cpu = mantissa::cpu;

namespace {

// Sets a cap for one scope and restores the previous one.
struct Cap {
  explicit Cap(cpu::Isa isa) : before(cpu::max_isa()) { cpu::set_max_isa(isa); }
  ~Cap() { cpu::set_max_isa(before); }
  cpu::Isa before;
};

// The prefix of the implementation a cap runs.
const char* prefix_of(cpu::Isa isa) {
  return isa >= cpu::Isa::avx512 ? "avx512:" : isa >= cpu::Isa::avx2 ? "avx2:" : "scalar:";
}

}  // namespace


// The tables the training path decodes with (every 1-byte preset's codes as
// bf16 bits): the vector path takes the sign-magnitude route (128-entry
// table, folds as exponent steps) for the float formats and the full table
// for the others, and falls back to the full table with a multiply for
// folds whose products leave bf16's normal range and for fnuz's 0x80. Every
// code, with folds from 2^-150 to 2^149, must give the table's bits times
// the fold, in 16-bit and widened output, also with MXCSR's
// denormals-are-zero bit set (which a host program may set), under every cap.
TEST(Lookup16, PresetTablesDecodeEveryCodeLikeTheTable) {
  std::mt19937 rng(11);
  std::vector<uint8_t> codes(2048 + 7);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i < 1024 ? i % 256 : rng());
  // Mostly ordinary codes with one NaN/inf code in a few 32-element steps, as in training.
  for (size_t i = 1024; i < 1536; ++i) codes[i] &= 0x3F;
  codes[1100] = 0x7F;
  codes[1300] = 0xFF;
  codes[1400] = 0x80;
  std::vector<float> fold(codes.size());
  for (size_t i = 0; i < fold.size(); ++i) fold[i] = std::ldexp(1.0f, static_cast<int>(rng() % 300) - 150);
  const unsigned csr = _mm_getcsr();
  for (cpu::Isa isa : cpu::kAllIsas) {  // every cap the host can honour
    if (isa > cpu::detected_isa()) continue;
    const Cap cap(isa);
    ASSERT_EQ(std::string(mf::lookup_implementation()).rfind(prefix_of(isa), 0), 0u) << mf::lookup_implementation();
    int checked = 0;
    for (const mf::Format& f : mf::presets()) {
      if (f.storage_bytes() != 1) continue;
      mf::Table16 table;
      for (uint32_t c = 0; c < 256; ++c)
        table[c] = static_cast<uint16_t>(std::bit_cast<uint32_t>(mf::decode_f32(f, c)) >> 16);
      for (bool daz : {false, true}) {
        _mm_setcsr(daz ? (csr | 0x0040) : csr);
        for (size_t group : {size_t{0}, size_t{1}, size_t{32}, size_t{100}})
          for (size_t n : {size_t{1}, size_t{45}, codes.size()}) {
            const float* fo = group ? fold.data() : nullptr;
            std::vector<uint16_t> out(n + 1, 0xABCD);
            std::vector<float> wide(n + 1, -1.0f);
            mf::lookup16(table, codes.data(), out.data(), n, fo, group ? group : 1);
            mf::lookup16_widen(table, codes.data(), wide.data(), n, fo, group ? group : 1);
            for (size_t i = 0; i < n; ++i) {
              uint16_t want = table[codes[i]];
              if (fo) want = static_cast<uint16_t>(std::bit_cast<uint32_t>(std::bit_cast<float>(uint32_t{want} << 16) *
                                                                           fo[i / group]) >> 16);
              ASSERT_EQ(out[i], want) << f.name << " code " << int(codes[i]) << " group " << group << " daz " << daz
                                      << " " << cpu::isa_name(isa);
              ASSERT_EQ(std::bit_cast<uint32_t>(wide[i]), uint32_t{want} << 16) << f.name << " code " << int(codes[i]);
            }
            EXPECT_EQ(out[n], 0xABCD);
            EXPECT_EQ(wide[n], -1.0f);
          }
      }
      _mm_setcsr(csr);
      ++checked;
    }
    EXPECT_GE(checked, 10);
  }
}
