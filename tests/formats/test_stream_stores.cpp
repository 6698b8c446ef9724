// The streaming-store paths of the bulk converters (non-temporal stores of
// whole 64-byte lines, ordinary masked stores before the first aligned line
// and after the last one) against the scalar reference, bit for bit. The
// size threshold is lowered to 0 so that small arrays stream; every length
// 0..300 at every destination offset within a line covers each head/body/tail
// split, odd offsets of 2-byte codes the no-streaming fallback, and a
// threaded array the per-thread splits. Bytes around the destination must
// stay untouched.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/convert_plan.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/convert.hpp"

namespace mf = mantissa::formats;

namespace {

// Sets the streaming threshold for one test and restores it.
struct StreamThreshold {
  size_t before = mf::detail::stream_min_bytes();
  explicit StreamThreshold(size_t bytes) { mf::detail::set_stream_min_bytes(bytes); }
  ~StreamThreshold() { mf::detail::set_stream_min_bytes(before); }
};

// Normal values around 1 with every fourth a raw bit pattern (NaN payloads,
// infinities, fp32 subnormals: the lanes the kernels fix up).
std::vector<float> inputs(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i % 4 == 3 ? std::bit_cast<float>(static_cast<uint32_t>(rng())) : normal(rng);
  return v;
}

// quantize(in[0..n)) into a 64-byte aligned buffer at byte offset `offset`,
// checked against encode() code by code, with guard bytes on both sides.
void check(const mf::Format& f, const std::vector<float>& in, size_t n, size_t offset, const std::string& what) {
  const size_t bytes = static_cast<size_t>(f.storage_bytes());
  constexpr uint8_t kGuard = 0xA5;
  std::vector<uint8_t> storage(n * bytes + offset + 64 + 128, kGuard);
  uint8_t* line = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  uint8_t* out = line + offset;
  mf::quantize(f, in.data(), out, n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t got = 0;
    std::memcpy(&got, out + i * bytes, bytes);
    const uint32_t want = mf::encode(f, in[i], {}, i);
    ASSERT_EQ(got, want) << what << " n=" << n << " offset=" << offset << " i=" << i << " x bits 0x" << std::hex
                         << std::bit_cast<uint32_t>(in[i]) << " kernel " << mf::last_kernel();
  }
  for (uint8_t* p = storage.data(); p < out; ++p)
    ASSERT_EQ(*p, kGuard) << what << " n=" << n << " offset=" << offset << ": wrote before the destination";
  for (uint8_t* p = out + n * bytes; p < storage.data() + storage.size(); ++p)
    ASSERT_EQ(*p, kGuard) << what << " n=" << n << " offset=" << offset << ": wrote past the end";
}

const char* const kFormats[] = {"bf16", "fp16", "e4m3fn", "e5m2", "e2m3fn", "e2m1fn"};

// The best tier this CPU has, then AVX2 (whose kernels use ordinary stores
// only: the same bytes must come out and none around them change).
constexpr mantissa::cpu::Isa kTiers[] = {mantissa::cpu::Isa::avx512_bf16_fp16, mantissa::cpu::Isa::avx2};
struct IsaCap {
  explicit IsaCap(mantissa::cpu::Isa cap) { mantissa::cpu::set_max_isa(cap); }
  ~IsaCap() { mantissa::cpu::set_max_isa(mantissa::cpu::Isa::avx512_bf16_fp16); }
};

}  // namespace

TEST(StreamStores, EveryLengthAndDestinationOffset) {
  StreamThreshold always(0);
  const std::vector<float> in = inputs(300, 3);
  for (mantissa::cpu::Isa tier : kTiers) {
    IsaCap cap(tier);
    for (const char* name : kFormats)
      for (size_t offset = 0; offset < 64; ++offset)
        for (size_t n = 0; n <= 300; n += n < 140 ? 1 : 7) check(mf::preset(name), in, n, offset, name);
  }
}

TEST(StreamStores, ThreadedArrays) {
  StreamThreshold always(0);
  const std::vector<float> in = inputs(3 * mf::kParallelThreshold + 37, 5);
  for (const char* name : kFormats)
    for (size_t offset : {0, 2, 6, 16, 33})
      check(mf::preset(name), in, in.size(), offset, std::string(name) + " threaded");
}

// Above the default threshold (4 MiB of codes) without lowering it: the
// configuration the benchmarks measure.
TEST(StreamStores, DefaultThresholdLargeArray) {
  const std::vector<float> in = inputs((size_t{4} << 20) / 2 + 1001, 7);
  EXPECT_GE(in.size() * 2, mf::detail::stream_min_bytes());
  check(mf::preset("bf16"), in, in.size(), 16, "bf16 large");
  check(mf::preset("fp16"), in, in.size(), 2, "fp16 large");
}

// fake_quantize's one-pass bf16/fp16 kernels stream their fp32 output the
// same way: every length at every 4-byte offset within a line, against
// decode(encode()) bit for bit, guard bytes untouched, threaded too.
namespace {
void check_fake(const mf::Format& f, const std::vector<float>& in, size_t n, size_t offset, const std::string& what) {
  const uint32_t kGuard = 0xA5A5A5A5u;
  std::vector<uint32_t> storage(n + offset + 16 + 32, kGuard);
  uint32_t* line = storage.data() + (16 - reinterpret_cast<uintptr_t>(storage.data()) % 64 / 4) % 16;
  float* out = reinterpret_cast<float*>(line + offset);
  mf::fake_quantize(f, in.data(), out, n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t want = std::bit_cast<uint32_t>(mf::decode_f32(f, mf::encode(f, in[i], {}, i)));
    ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), want) << what << " n=" << n << " offset=" << offset << " i=" << i
                                                     << " kernel " << mf::last_kernel();
  }
  for (uint32_t* p = storage.data(); p < line + offset; ++p) ASSERT_EQ(*p, kGuard) << what << ": wrote before";
  for (uint32_t* p = line + offset + n; p < storage.data() + storage.size(); ++p)
    ASSERT_EQ(*p, kGuard) << what << ": wrote past the end";
}
}  // namespace

TEST(StreamStores, FakeQuantizeEveryLengthAndOffset) {
  StreamThreshold always(0);
  const std::vector<float> in = inputs(300, 9), big = inputs(3 * mf::kParallelThreshold + 37, 11);
  for (mantissa::cpu::Isa tier : kTiers) {
    IsaCap cap(tier);
    for (const char* name : {"bf16", "fp16"}) {
      for (size_t offset = 0; offset < 16; ++offset)
        for (size_t n = 0; n <= 300; n += n < 70 ? 1 : 7) check_fake(mf::preset(name), in, n, offset, name);
      check_fake(mf::preset(name), big, big.size(), 3, std::string(name) + " threaded");
    }
  }
}
