// Exhaustive: every one of the 2^32 fp32 bit patterns through the best vector
// kernel of this CPU and through the scalar reference encoder, for bf16,
// fp16, e4m3fn and e5m2, nearest-even, saturating and not. Runs on demand
// (ctest -L exhaustive); about 35 billion scalar encodes, so it takes many
// minutes on 2 cores.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "mantissa/formats/convert.hpp"

namespace mf = mantissa::formats;

namespace {

constexpr uint64_t kBlock = uint64_t{1} << 15;
constexpr uint64_t kAll = uint64_t{1} << 32;

void run_exhaustive(const char* name, bool saturate) {
  const mf::Format& f = mf::preset(name);
  const mf::RoundOptions opt{.mode = mf::Round::nearest_even, .saturate = saturate};
  const size_t bytes = static_cast<size_t>(f.storage_bytes());
  std::atomic<uint64_t> mismatches{0};
  std::string kernel;
  {
    float probe = 1.0f;
    uint32_t code = 0;
    mf::quantize(f, &probe, &code, 1, opt);
    kernel = mf::last_kernel();
  }
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
  {
    std::vector<float> in(kBlock);
    std::vector<uint8_t> codes(kBlock * bytes);
#pragma omp for schedule(dynamic, 16)
    for (int64_t b = 0; b < static_cast<int64_t>(kAll / kBlock); ++b) {
      const uint64_t first = static_cast<uint64_t>(b) * kBlock;
      for (uint64_t i = 0; i < kBlock; ++i) in[i] = std::bit_cast<float>(static_cast<uint32_t>(first + i));
      // One-thread calls inside the parallel loop (kBlock < kParallelThreshold).
      mf::quantize(f, in.data(), codes.data(), kBlock, opt);
      for (uint64_t i = 0; i < kBlock; ++i) {
        uint32_t got = 0;
        std::memcpy(&got, codes.data() + i * bytes, bytes);
        const uint32_t want = mf::encode(f, in[i], opt, 0);
        if (got != want && mismatches.fetch_add(1) < 10) {
#pragma omp critical
          std::printf("MISMATCH %s%s: fp32 bits 0x%08x got 0x%x want 0x%x\n", name, saturate ? " sat" : "",
                      static_cast<uint32_t>(first + i), got, want);
        }
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("exhaustive %-7s %-9s kernel %-45s 2^32 inputs, %llu mismatches, %.1f s\n", name,
              saturate ? "saturate" : "no-sat", kernel.c_str(), static_cast<unsigned long long>(mismatches.load()),
              secs);
  std::fflush(stdout);
  EXPECT_EQ(mismatches.load(), 0u) << name << (saturate ? " saturating" : "");
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
