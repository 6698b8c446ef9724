// Exhaustive: every one of the 2^32 fp32 bit patterns through the fused FP8
// cast (formats::ScaledCast, whose fp32 rounder covers e4m3fn and e5m2) and
// through the bulk converter formats::quantize, which
// test_exhaustive_convert.cpp checks against the reference encoder on the
// same inputs; the decode against the code's table entry times its block
// factor (powers of two from 2^-30 to 2^30, one per 32 elements). Saturating
// and not, on the best vector tier of this CPU and on AVX2. Runs on demand (ctest -L exhaustive).
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/formats/scaled_cast.hpp"

namespace mf = mantissa::formats;

namespace {

constexpr uint64_t kBlock = uint64_t{1} << 15;
constexpr uint64_t kAll = uint64_t{1} << 32;
constexpr size_t kGroup = 32;

// Under `cap` (the bulk converter that gives the reference runs under it
// too, checked against the reference encoder at every tier by
// test_exhaustive_convert.cpp).
void run_exhaustive(const char* name, bool saturate, mantissa::cpu::Isa cap) {
  mantissa::cpu::set_max_isa(cap);
  const mf::Format& f = mf::preset(name);
  const mf::RoundOptions opt{.mode = mf::Round::nearest_even, .saturate = saturate};
  mf::Table16 table{};
  for (uint32_t c = 0; c < 256; ++c) table[c] = static_cast<uint16_t>(std::bit_cast<uint32_t>(mf::decode_f32(f, c)) >> 16);
  const mf::ScaledCast cast(f, saturate, table);
  std::vector<float> mult(kBlock / kGroup, 1.0f), fold(kBlock / kGroup);
  for (size_t g = 0; g < fold.size(); ++g) fold[g] = std::ldexp(1.0f, static_cast<int>(g % 61) - 30);
  std::atomic<uint64_t> mismatches{0};
#pragma omp parallel
  {
    std::vector<float> in(kBlock);
    std::vector<uint8_t> codes(kBlock), want(kBlock);
    std::vector<uint16_t> dec(kBlock);
#pragma omp for schedule(dynamic, 16)
    for (int64_t b = 0; b < static_cast<int64_t>(kAll / kBlock); ++b) {
      const uint64_t first = static_cast<uint64_t>(b) * kBlock;
      for (uint64_t i = 0; i < kBlock; ++i) in[i] = std::bit_cast<float>(static_cast<uint32_t>(first + i));
      cast.run(in.data(), kBlock, mult.data(), kGroup, codes.data(), dec.data(), fold.data());
      mf::quantize(f, in.data(), want.data(), kBlock, opt);  // one thread: kBlock < kParallelThreshold
      for (uint64_t i = 0; i < kBlock; ++i) {
        const float v = std::bit_cast<float>(static_cast<uint32_t>(table[want[i]]) << 16) * fold[i / kGroup];
        const auto want_dec = static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
        if ((codes[i] != want[i] || dec[i] != want_dec) && mismatches.fetch_add(1) < 10) {
#pragma omp critical
          std::printf("MISMATCH %s%s: fp32 bits 0x%08x code 0x%x want 0x%x decode 0x%x want 0x%x\n", name,
                      saturate ? " sat" : "", static_cast<uint32_t>(first + i), codes[i], want[i], dec[i], want_dec);
        }
      }
    }
  }
  std::printf("exhaustive scaled cast %-7s %-9s %-16s 2^32 inputs, %llu mismatches\n", name,
              saturate ? "saturate" : "no-sat", mantissa::cpu::isa_name(cap),
              static_cast<unsigned long long>(mismatches.load()));
  mantissa::cpu::set_max_isa(mantissa::cpu::Isa::avx512_bf16_fp16);
  EXPECT_EQ(mismatches.load(), 0u) << name << (saturate ? " saturating " : " ") << mantissa::cpu::isa_name(cap);
}

}  // namespace

static_assert(kBlock < mf::kParallelThreshold, "blocks must stay on the calling thread");

// The best tier this CPU has, then AVX2 under a cap.
constexpr mantissa::cpu::Isa kTiers[] = {mantissa::cpu::Isa::avx512_bf16_fp16, mantissa::cpu::Isa::avx2};

TEST(ExhaustiveScaledCast, E4m3fn) {
  for (mantissa::cpu::Isa cap : kTiers) {
    run_exhaustive("e4m3fn", true, cap);
    run_exhaustive("e4m3fn", false, cap);
  }
}
TEST(ExhaustiveScaledCast, E5m2) {
  for (mantissa::cpu::Isa cap : kTiers) {
    run_exhaustive("e5m2", true, cap);
    run_exhaustive("e5m2", false, cap);
  }
}
