// Exhaustive: every one of the 2^32 fp32 bit patterns through the best vector
// kernel of this CPU, the AVX2 one (under a cap) and the scalar reference
// encoder, for bf16,
// fp16, e4m3fn and e5m2, nearest-even, saturating and not. Runs on demand
// (ctest -L exhaustive); about 35 billion scalar encodes, so it takes many
// minutes on 2 cores.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/convert.hpp"

namespace mf = mantissa::formats;

namespace {

constexpr uint64_t kBlock = uint64_t{1} << 15;
constexpr uint64_t kChunk = uint64_t{1} << 24;  // inputs per round of kernel passes
constexpr uint64_t kAll = uint64_t{1} << 32;

// The vector tiers checked: the best this CPU has, and AVX2 (under a cap)
// where that is a different tier.
std::vector<mantissa::cpu::Isa> vector_caps() {
  std::vector<mantissa::cpu::Isa> v{mantissa::cpu::detected_isa()};
  if (v[0] > mantissa::cpu::Isa::avx2) v.push_back(mantissa::cpu::Isa::avx2);
  return v;
}

// The ISA cap is global, so every tier converts a chunk of inputs in its own
// parallel pass; the scalar encodes (the slow part) then check all of them.
void run_exhaustive(const char* name, bool saturate) {
  const mf::Format& f = mf::preset(name);
  const mf::RoundOptions opt{.mode = mf::Round::nearest_even, .saturate = saturate};
  const size_t bytes = static_cast<size_t>(f.storage_bytes());
  const std::vector<mantissa::cpu::Isa> caps = vector_caps();
  std::vector<uint64_t> mismatches(caps.size(), 0);
  std::vector<std::string> kernels;
  for (mantissa::cpu::Isa cap : caps) {
    mantissa::cpu::set_max_isa(cap);
    float probe = 1.0f;
    uint32_t code = 0;
    mf::quantize(f, &probe, &code, 1, opt);
    kernels.push_back(mf::last_kernel());
  }
  std::vector<float> in(kChunk);
  std::vector<std::vector<uint8_t>> codes(caps.size(), std::vector<uint8_t>(kChunk * bytes));
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t first = 0; first < kAll; first += kChunk) {
#pragma omp parallel for
    for (int64_t i = 0; i < static_cast<int64_t>(kChunk); ++i)
      in[static_cast<size_t>(i)] = std::bit_cast<float>(static_cast<uint32_t>(first + static_cast<uint64_t>(i)));
    for (size_t k = 0; k < caps.size(); ++k) {
      mantissa::cpu::set_max_isa(caps[k]);
      // One-thread calls inside the parallel loop (kBlock < kParallelThreshold).
#pragma omp parallel for schedule(dynamic, 16)
      for (int64_t b = 0; b < static_cast<int64_t>(kChunk / kBlock); ++b) {
        const size_t at = static_cast<size_t>(b) * kBlock;
        mf::quantize(f, in.data() + at, codes[k].data() + at * bytes, kBlock, opt);
      }
    }
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t b = 0; b < static_cast<int64_t>(kChunk / kBlock); ++b) {
      for (size_t i = static_cast<size_t>(b) * kBlock; i < static_cast<size_t>(b + 1) * kBlock; ++i) {
        const uint32_t want = mf::encode(f, in[i], opt, 0);
        for (size_t k = 0; k < caps.size(); ++k) {
          uint32_t got = 0;
          std::memcpy(&got, codes[k].data() + i * bytes, bytes);
          if (got == want) continue;
          uint64_t seen = 0;
#pragma omp atomic capture
          seen = mismatches[k]++;
          if (seen < 10) {
#pragma omp critical
            std::printf("MISMATCH %s%s %s: fp32 bits 0x%08x got 0x%x want 0x%x\n", name, saturate ? " sat" : "",
                        kernels[k].c_str(), static_cast<uint32_t>(first + i), got, want);
          }
        }
      }
    }
  }
  mantissa::cpu::set_max_isa(mantissa::cpu::Isa::avx512_bf16_fp16);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t k = 0; k < caps.size(); ++k) {
    std::printf("exhaustive %-7s %-9s kernel %-45s 2^32 inputs, %llu mismatches, %.1f s (all tiers)\n", name,
                saturate ? "saturate" : "no-sat", kernels[k].c_str(), static_cast<unsigned long long>(mismatches[k]),
                secs);
    EXPECT_EQ(mismatches[k], 0u) << name << (saturate ? " saturating " : " ") << kernels[k];
  }
  std::fflush(stdout);
}

}  // namespace

static_assert(kBlock < mf::kParallelThreshold, "blocks must stay on the calling thread");

TEST(ExhaustiveConvert, Bf16) {
  run_exhaustive("bf16", false);
  run_exhaustive("bf16", true);
}
TEST(ExhaustiveConvert, Fp16) {
  run_exhaustive("fp16", false);
  run_exhaustive("fp16", true);
}
TEST(ExhaustiveConvert, E4m3fn) {
  run_exhaustive("e4m3fn", false);
  run_exhaustive("e4m3fn", true);
}
TEST(ExhaustiveConvert, E5m2) {
  run_exhaustive("e5m2", false);
  run_exhaustive("e5m2", true);
}
