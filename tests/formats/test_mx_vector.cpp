// The vector MX kernels (convert_mx.cpp: on AVX-512 16 blocks at a time
// through a transposing max tree and vector scale arithmetic, one block at a
// time for other block sizes and leftovers; on AVX2, run under a cap, every
// block on its own) against the scalar loop of mx.cpp, which
// test_mx.cpp checks against a float64 reference. Codes and scales must be
// identical on random data and on every edge case of the scale rule: inf/NaN
// blocks, zero and -0 blocks, all-subnormal blocks, amax at and next to the
// element max (the ceil rule's boundary), powers of two over fp32's whole
// range, blocks near FLT_MAX (two-factor scaling), and lengths and start
// offsets that are not multiples of 32.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/mx.hpp"

namespace mf = mantissa::formats;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

const char* const kPresets[] = {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8"};
const mf::Round kModes[] = {mf::Round::nearest_even, mf::Round::nearest_away, mf::Round::toward_zero,
                            mf::Round::up,           mf::Round::down,         mf::Round::stochastic};

float next_up(float x) { return std::nextafter(x, kInf); }
float next_down(float x) { return std::nextafter(x, -kInf); }

// One 32-element block: `fill` values of magnitude <= 1 times 2^e, with the
// block's largest magnitude set to `top` (placed at `at`).
std::vector<float> block_with_top(std::mt19937& rng, float top, int at) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> b(32);
  for (float& v : b) v = u(rng) * top;
  b[static_cast<size_t>(at)] = top;
  return b;
}

// Blocks that exercise the scale rule's edges for element max `emax_value`,
// interleaved with ordinary blocks so that every group of 16 mixes them.
std::vector<float> edge_case_data(double element_max, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pos(0, 31);
  std::vector<std::vector<float>> blocks;
  // Non-finite at the first, middle and last lane, both signs, together.
  for (float special : {kNan, -kNan, kInf, -kInf}) {
    for (int at : {0, 15, 16, 31}) {
      std::vector<float> b = block_with_top(rng, 3.0f, pos(rng));
      b[static_cast<size_t>(at)] = special;
      blocks.push_back(b);
    }
  }
  std::vector<float> both = block_with_top(rng, 1.0f, 0);
  both[3] = kInf;
  both[29] = kNan;
  blocks.push_back(both);
  // Zeros: +0 only, -0 only, mixed, and one tiny value among zeros.
  blocks.push_back(std::vector<float>(32, 0.0f));
  blocks.push_back(std::vector<float>(32, -0.0f));
  std::vector<float> mixed(32, 0.0f);
  for (size_t i = 0; i < 32; i += 3) mixed[i] = -0.0f;
  blocks.push_back(mixed);
  mixed[7] = std::numeric_limits<float>::denorm_min();
  blocks.push_back(mixed);
  // All-subnormal blocks (amax normalised through the int -> float step),
  // and the largest subnormal next to the smallest normal.
  std::uniform_int_distribution<uint32_t> sub_bits(1, 0x7FFFFF);
  for (int k = 0; k < 4; ++k) {
    std::vector<float> b(32);
    const uint32_t cap = k == 0 ? 1u : k == 1 ? 0xFFu : 0x7FFFFFu;
    for (float& v : b) {
      const uint32_t bits = 1 + sub_bits(rng) % cap;
      v = std::bit_cast<float>(bits | (rng() % 2 ? 0x80000000u : 0u));
    }
    blocks.push_back(b);
  }
  blocks.push_back(block_with_top(rng, next_down(std::numeric_limits<float>::min()), 5));
  blocks.push_back(block_with_top(rng, std::numeric_limits<float>::min(), 9));
  // amax at, just above and just below element max x 2^k (the ceil boundary),
  // and at the power of two just above it, over a range of k.
  for (int k : {-140, -126, -40, -3, 0, 1, 7, 60, 100, 112}) {
    const float at_max = static_cast<float>(std::ldexp(element_max, k));
    if (!std::isfinite(at_max) || at_max == 0) continue;
    for (float top : {at_max, next_up(at_max), next_down(at_max), static_cast<float>(std::ldexp(1.0, k + 1))})
      blocks.push_back(block_with_top(rng, top, pos(rng)));
  }
  // Powers of two over fp32's range; values near FLT_MAX (scale 2^127 and the
  // factor split in two); negative tops.
  for (int e = -149; e <= 127; e += 9) blocks.push_back(block_with_top(rng, std::ldexp(1.0f, e), pos(rng)));
  for (float top : {std::numeric_limits<float>::max(), 3e38f, 1.7e38f, 2e37f, 1e36f, -3e38f})
    blocks.push_back(block_with_top(rng, top, pos(rng)));
  // Ordinary blocks of mixed magnitudes between the edge cases.
  std::uniform_int_distribution<int> exp(-30, 30);
  std::vector<float> out;
  for (const std::vector<float>& b : blocks) {
    out.insert(out.end(), b.begin(), b.end());
    for (int r = 0; r < 3; ++r) {
      const int e = exp(rng);
      for (int i = 0; i < 32; ++i) out.push_back(std::ldexp(normal(rng), e));
    }
  }
  return out;
}

// mx_quantize with the vector kernel, then with the ISA capped to scalar.
void expect_same_bits(const mf::MxConfig& cfg, const float* x, size_t n, const std::string& what) {
  const mantissa::cpu::Isa before = mantissa::cpu::active_isa();
  const mf::MxArray fast = mf::mx_quantize(cfg, x, n);
  mantissa::cpu::set_max_isa(mantissa::cpu::Isa::scalar);
  const mf::MxArray slow = mf::mx_quantize(cfg, x, n);
  mantissa::cpu::set_max_isa(before);
  ASSERT_EQ(fast.scales.size(), slow.scales.size()) << what;
  for (size_t b = 0; b < fast.scales.size(); ++b)
    ASSERT_EQ(int{fast.scales[b]}, int{slow.scales[b]}) << what << " block " << b;
  ASSERT_EQ(fast.codes.size(), slow.codes.size()) << what;
  for (size_t i = 0; i < fast.codes.size(); ++i)
    ASSERT_EQ(int{fast.codes[i]}, int{slow.codes[i]}) << what << " code byte " << i << " x=" << x[i / (fast.codes.size() / n)];
}

std::string describe(const mf::MxConfig& cfg) {
  return cfg.element.name + " block " + std::to_string(cfg.block) +
         (cfg.scale_rounding == mf::ScaleRounding::ceil ? " ceil " : " floor ") + mf::round_name(cfg.round.mode) +
         (cfg.round.saturate ? " sat" : "") + (cfg.round.flush_subnormals ? " ftz" : "");
}

// Whole data, prefixes whose last block is short, and a start offset that
// moves every block boundary.
void check_lengths(const mf::MxConfig& cfg, const std::vector<float>& x) {
  const std::string what = describe(cfg);
  for (const size_t offset : {size_t{0}, size_t{7}}) {
    for (const size_t n : {size_t{1}, size_t{31}, size_t{33}, size_t{16 * 32 - 1}, size_t{16 * 32 + 1},
                           size_t{48 * 32 + 20}, x.size() - offset}) {
      if (n + offset > x.size()) continue;
      expect_same_bits(cfg, x.data() + offset, n, what + " offset " + std::to_string(offset) + " n " + std::to_string(n));
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

// Blocks of N(0, 1) values, every 7th block scaled by a random power of two.
std::vector<float> mixed_magnitude_data(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-20, 20);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::ldexp(normal(rng), (i / 32) % 7 == 3 ? exp(rng) : 0);
  return v;
}

// The vector kernels this CPU can run: the best one it has, and the AVX2
// one (under a cap) where that is a different tier.
std::vector<mantissa::cpu::Isa> vector_caps() {
  std::vector<mantissa::cpu::Isa> v;
  const mantissa::cpu::Isa top = mantissa::cpu::detected_isa();
  if (top >= mantissa::cpu::Isa::avx2) v.push_back(top);
  if (top > mantissa::cpu::Isa::avx2) v.push_back(mantissa::cpu::Isa::avx2);
  return v;
}

// Caps the ISA for one pass of a test and lifts the cap after it.
struct CapScope {
  explicit CapScope(mantissa::cpu::Isa cap) { mantissa::cpu::set_max_isa(cap); }
  ~CapScope() { mantissa::cpu::set_max_isa(mantissa::cpu::Isa::avx512_bf16_fp16); }
};

}  // namespace

TEST(MxVector, PresetsEveryModeBothScaleRulesEdgeCasesAndTails) {
  if (vector_caps().empty()) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar path exists";
  for (const mantissa::cpu::Isa cap : vector_caps()) {
    CapScope scope(cap);
    SCOPED_TRACE(mantissa::cpu::isa_name(cap));
    for (const char* name : kPresets) {
      const mf::MxConfig base = mf::mx_preset(name);
      const double element_max = base.element.kind == mf::Kind::integer ? 127.0 / 64 : base.element.max();
      const std::vector<float> x = edge_case_data(element_max, 3);
      for (const auto rule : {mf::ScaleRounding::floor, mf::ScaleRounding::ceil}) {
        for (const mf::Round mode : kModes) {
          mf::MxConfig cfg = base;
          cfg.scale_rounding = rule;
          cfg.round.mode = mode;
          cfg.round.seed = 9;
          check_lengths(cfg, x);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(MxVector, RoundingOptionsAndOtherElementFormats) {
  if (vector_caps().empty()) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar path exists";
  for (const mantissa::cpu::Isa cap : vector_caps()) {
    CapScope scope(cap);
    SCOPED_TRACE(mantissa::cpu::isa_name(cap));
    // Non-saturating and flushing element rounding; 2-byte elements and the
    // fnuz formats (integer rounder, and a positive fp16-route shift that
    // needs two factors for zero blocks).
    for (const char* element : {"e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e3m4", "bf16", "fp16", "e2m1fn"}) {
      for (const bool saturate : {true, false}) {
        for (const bool flush : {false, true}) {
          for (const mf::Round mode : {mf::Round::nearest_even, mf::Round::up, mf::Round::stochastic}) {
            mf::MxConfig cfg;
            cfg.element = mf::preset(element);
            cfg.round = {.mode = mode, .saturate = saturate, .flush_subnormals = flush, .random_bits = 11, .seed = 4};
            for (const auto rule : {mf::ScaleRounding::floor, mf::ScaleRounding::ceil}) {
              cfg.scale_rounding = rule;
              const std::vector<float> x = edge_case_data(cfg.element.max(), 17);
              expect_same_bits(cfg, x.data(), x.size(), describe(cfg));
              expect_same_bits(cfg, x.data() + 3, 16 * 32 + 5, describe(cfg) + " offset 3");
              if (HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(MxVector, OtherBlockSizesAndTheThreadedSplit) {
  if (vector_caps().empty()) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar path exists";
  for (const mantissa::cpu::Isa cap : vector_caps()) {
    CapScope scope(cap);
    SCOPED_TRACE(mantissa::cpu::isa_name(cap));
    mf::MxConfig cfg = mf::mx_preset("mxfp8_e4m3");
    const std::vector<float> x = edge_case_data(448, 23);
    for (const int block : {1, 16, 31, 33, 64}) {
      cfg.block = block;
      expect_same_bits(cfg, x.data(), x.size(), describe(cfg));
      expect_same_bits(cfg, x.data() + 5, x.size() - 9, describe(cfg) + " offset 5");
    }
    // Above kParallelThreshold the blocks are split over OpenMP threads in
    // whole groups of 16; the last thread's range ends in a short block.
    std::vector<float> big;
    while (big.size() < mf::kParallelThreshold * 2 + 77) big.insert(big.end(), x.begin(), x.end());
    big.resize(mf::kParallelThreshold * 2 + 77);
    for (const char* name : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp4", "mxint8"}) {
      mf::MxConfig c = mf::mx_preset(name);
      for (const auto rule : {mf::ScaleRounding::floor, mf::ScaleRounding::ceil}) {
        c.scale_rounding = rule;
        expect_same_bits(c, big.data(), big.size(), describe(c) + " threaded");
        expect_same_bits(c, big.data() + 1, big.size() - 1, describe(c) + " threaded offset 1");
      }
    }
  }
}

TEST(MxVector, MixedMagnitudesAndBlocksAtTheRangeEnds) {
  if (vector_caps().empty()) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar path exists";
  for (const mantissa::cpu::Isa cap : vector_caps()) {
    CapScope scope(cap);
    SCOPED_TRACE(mantissa::cpu::isa_name(cap));
    // mx_quantize runs the vector kernel the cap allows; capping the ISA to
    // scalar runs mx.cpp's reference loop. Both must agree bit for bit.
    std::vector<float> x = mixed_magnitude_data(5000 + 17, 11);
    // Blocks at the ends of fp32's range, where the shared scale is clipped or
    // the scaled elements leave the normal range: one large and many tiny values.
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int top : {127, 120, 60, -60, -100, -120, -126, -135, -149}) {
      for (int k = 0; k < 32; ++k) {
        const int e = k == 0 ? top : std::max(top - k * 4, -149);
        x.push_back(std::ldexp(normal(rng), e));
      }
    }
    for (const char* name : kPresets) {
      for (const auto mode : {mf::Round::nearest_even, mf::Round::nearest_away, mf::Round::toward_zero, mf::Round::up,
                              mf::Round::down, mf::Round::stochastic}) {
        SCOPED_TRACE(std::string(name) + " " + mf::round_name(mode));
        mf::MxConfig cfg = mf::mx_preset(name);
        cfg.round.mode = mode;
        cfg.round.seed = 9;
        const mantissa::cpu::Isa before = mantissa::cpu::active_isa();
        const mf::MxArray fast = mf::mx_quantize(cfg, x.data(), x.size());
        mantissa::cpu::set_max_isa(mantissa::cpu::Isa::scalar);
        const mf::MxArray slow = mf::mx_quantize(cfg, x.data(), x.size());
        mantissa::cpu::set_max_isa(before);
        EXPECT_EQ(fast.scales, slow.scales);
        EXPECT_EQ(fast.codes, slow.codes);
      }
    }
  }
}
