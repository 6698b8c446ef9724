// mx_quantize_into (caller buffers) against mx_quantize with the ISA capped to
// scalar (the scalar loop test_mx.cpp checks against float64): identical
// codes and scales for ragged lengths (not multiples of 32, so the last block
// is short), buffers that start anywhere within a cache line (the streaming
// path stages whole lines), buffers full of garbage beforehand (every byte
// must be written, NaN blocks' codes included), threaded lengths, streaming
// forced on and off. Bad buffer sizes throw std::invalid_argument naming the
// buffer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/convert_plan.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/mx.hpp"

namespace mf = mantissa::formats;

namespace {

const char* const kPresets[] = {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8"};

struct StreamThreshold {
  size_t before = mf::detail::stream_min_bytes();
  explicit StreamThreshold(size_t bytes) { mf::detail::set_stream_min_bytes(bytes); }
  ~StreamThreshold() { mf::detail::set_stream_min_bytes(before); }
};

// Blocks of magnitudes 2^-140 .. 2^120, with a NaN or inf in some blocks.
std::vector<float> data(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t b = 0; b * 32 < n; ++b) {
    const int e = static_cast<int>(rng() % 261) - 140;
    for (size_t i = b * 32; i < std::min(n, b * 32 + 32); ++i) v[i] = std::ldexp(normal(rng), e);
    if (b % 37 == 5) v[b * 32] = std::numeric_limits<float>::quiet_NaN();
    if (b % 41 == 7) v[std::min(n - 1, b * 32 + 31)] = -std::numeric_limits<float>::infinity();
  }
  return v;
}

// mx_quantize_into at code-buffer offset `offset` from a 64-byte line, both
// buffers prefilled with garbage, against the scalar mx_quantize.
void expect_same(const mf::MxConfig& cfg, const std::vector<float>& x, size_t n, size_t offset,
                 const std::string& what) {
  const mantissa::cpu::Isa before = mantissa::cpu::active_isa();
  mantissa::cpu::set_max_isa(mantissa::cpu::Isa::scalar);
  const mf::MxArray want = mf::mx_quantize(cfg, x.data(), n);
  mantissa::cpu::set_max_isa(before);
  std::vector<uint8_t> storage(want.codes.size() + 128, 0xA5);
  uint8_t* line = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  const std::span<uint8_t> codes(line + offset, want.codes.size());
  std::vector<uint8_t> scales(want.scales.size(), 0xA5);
  mf::mx_quantize_into(cfg, x.data(), n, codes, scales);
  ASSERT_EQ(scales, want.scales) << what << " n=" << n << " offset=" << offset;
  for (size_t i = 0; i < codes.size(); ++i)
    ASSERT_EQ(int{codes[i]}, int{want.codes[i]}) << what << " n=" << n << " offset=" << offset << " byte " << i;
  for (uint8_t* p = storage.data(); p < codes.data(); ++p) ASSERT_EQ(*p, 0xA5) << what << ": wrote before codes";
  for (uint8_t* p = codes.data() + codes.size(); p < storage.data() + storage.size(); ++p)
    ASSERT_EQ(*p, 0xA5) << what << ": wrote past codes";
}

}  // namespace

TEST(MxInto, SameBitsAsMxQuantizeRaggedLengthsAndOffsets) {
  const std::vector<float> x = data(40 * 32 + 31, 3);
  for (size_t threshold : {size_t{0}, mf::detail::stream_min_bytes()}) {
    StreamThreshold stream(threshold);
    for (const char* name : kPresets) {
      const mf::MxConfig cfg = mf::mx_preset(name);
      const std::string what = std::string(name) + (threshold == 0 ? " streamed" : "");
      for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{33}, size_t{16 * 32 + 5}, size_t{32 * 32 + 17},
                       x.size()})
        for (size_t offset : {0, 1, 16, 31, 32, 63}) expect_same(cfg, x, n, offset, what);
    }
  }
}

TEST(MxInto, ThreadedStreamedAndOtherBlockSizes) {
  StreamThreshold always(0);
  const std::vector<float> x = data(2 * mf::kParallelThreshold + 700 + 13, 5);
  for (const char* name : {"mxfp8_e4m3", "mxfp4", "mxint8"}) {
    mf::MxConfig cfg = mf::mx_preset(name);
    for (size_t offset : {0, 16, 45}) expect_same(cfg, x, x.size(), offset, std::string(name) + " threaded");
    cfg.block = 24;
    cfg.scale_rounding = mf::ScaleRounding::ceil;
    expect_same(cfg, x, x.size() - 3, 7, std::string(name) + " block 24 ceil");
  }
}

TEST(MxInto, BadBufferSizesNameTheBuffer) {
  const mf::MxConfig cfg = mf::mx_preset("mxfp8_e4m3");
  const std::vector<float> x(100, 1.0f);
  std::vector<uint8_t> codes(100), scales(4), short_codes(99), long_scales(5);
  EXPECT_NO_THROW(mf::mx_quantize_into(cfg, x.data(), 100, codes, scales));
  const auto message = [&](std::span<uint8_t> c, std::span<uint8_t> s) {
    try {
      mf::mx_quantize_into(cfg, x.data(), 100, c, s);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  const std::string bad_codes = message(short_codes, scales);
  EXPECT_NE(bad_codes.find("codes buffer has 99 bytes"), std::string::npos) << bad_codes;
  EXPECT_NE(bad_codes.find("need 100"), std::string::npos) << bad_codes;
  const std::string bad_scales = message(codes, long_scales);
  EXPECT_NE(bad_scales.find("scales buffer has 5 bytes"), std::string::npos) << bad_scales;
  EXPECT_NE(bad_scales.find("need 4"), std::string::npos) << bad_scales;
  mf::MxConfig bad = cfg;
  bad.block = 0;
  EXPECT_THROW(mf::mx_quantize_into(bad, x.data(), 100, codes, scales), std::invalid_argument);
}
