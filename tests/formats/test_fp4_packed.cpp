// FP4 casts with packed codes, their decode, and the Hadamard transform fused
// into the cast: packed codes against nibbles packed by hand from the one-
// byte codes; fp4_decode against the decoded output of the cast itself and
// the E4M3 scale table against the formats module's decoder; the fused
// rotation against hadamard16 followed by the plain cast, on the vector
// path, the scalar reference and with the ISA capped to avx2 and to scalar.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "formats/fp4_cases.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/fp4.hpp"
#include "mantissa/formats/hadamard16.hpp"
#include "mantissa/formats/round.hpp"

namespace mf = mantissa::formats;
namespace cpu = mantissa::cpu;

namespace {

struct IsaGuard {
  ~IsaGuard() { cpu::set_max_isa(cpu::Isa::avx512_bf16_fp16); }
};

using Cast = fp4_cases::Out;

// The scalar reference or the vector path.
Cast run(bool reference, const mf::Fp4Spec& s, const std::vector<float>& x, int64_t rows, int64_t cols) {
  return fp4_cases::run(!reference, s, x, rows, cols);
}

std::vector<uint8_t> pack_by_hand(const std::vector<uint8_t>& codes) {
  std::vector<uint8_t> p((codes.size() + 1) / 2, 0);
  for (size_t k = 0; k < codes.size(); ++k) p[k / 2] |= static_cast<uint8_t>((codes[k] & 0xF) << (4 * (k % 2)));
  return p;
}

using fp4_cases::heavy_tailed;

const float kSigns[16] = {1, -1, -1, 1, 1, 1, -1, 1, -1, -1, 1, -1, 1, 1, -1, -1};

std::vector<mf::Fp4Spec> specs() {
  std::vector<mf::Fp4Spec> v;
  for (auto scale : {mf::Fp4Scale::nvfp4, mf::Fp4Scale::mxfp4})
    for (auto round : {mf::Fp4Rounding::nearest_even, mf::Fp4Rounding::stochastic}) {
      const int64_t b = scale == mf::Fp4Scale::nvfp4 ? 16 : 32;
      for (auto [tr, tc] : std::vector<std::pair<int64_t, int64_t>>{{1, b}, {b, 1}, {b, b}})
        v.push_back({.scale = scale, .tile_rows = tr, .tile_cols = tc, .rounding = round, .seed = 31,
                     .headroom = scale == mf::Fp4Scale::mxfp4 && round == mf::Fp4Rounding::stochastic});
    }
  return v;
}

}  // namespace

TEST(Fp4Packed, CodesPackTwoPerByteAndDecodeToTheCastsValues) {
  IsaGuard guard;
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{67, 45}, {40, 64}, {3, 7}}) {
    const std::vector<float> x = heavy_tailed(static_cast<size_t>(rows * cols), 5);
    for (const mf::Fp4Spec& base : specs())
      for (bool reference : {false, true}) {
        SCOPED_TRACE(testing::Message() << rows << "x" << cols << " scale " << int(base.scale) << " tile "
                                        << base.tile_rows << "x" << base.tile_cols << " round "
                                        << int(base.rounding) << " reference " << reference);
        const Cast bytes = run(reference, base, x, rows, cols);
        mf::Fp4Spec ps = base;
        ps.packed = true;
        const Cast packed = run(reference, ps, x, rows, cols);
        EXPECT_EQ(packed.codes, pack_by_hand(bytes.codes));
        EXPECT_EQ(packed.scales, bytes.scales);
        EXPECT_EQ(packed.dec, bytes.dec);
        for (cpu::Isa isa : {cpu::Isa::avx512_bf16_fp16, cpu::Isa::avx2, cpu::Isa::scalar}) {
          cpu::set_max_isa(isa);
          std::vector<uint16_t> d1(x.size(), 0xEEEE), d2(x.size(), 0xEEEE);
          mf::fp4_decode(base, bytes.codes.data(), bytes.scales.data(), rows, cols, d1.data());
          mf::fp4_decode(ps, packed.codes.data(), packed.scales.data(), rows, cols, d2.data());
          EXPECT_EQ(d1, bytes.dec);
          EXPECT_EQ(d2, bytes.dec);
        }
        cpu::set_max_isa(cpu::Isa::avx512_bf16_fp16);
      }
  }
}

// The smallest MX exponent (-127): q x 2^-127 is an fp32 subnormal, still
// decoded to the cast's bits.
TEST(Fp4Packed, DecodeOfTinyMxBlocks) {
  std::vector<float> x(32, 0.0f);
  x[1] = 1e-39f;
  x[3] = -3e-39f;
  const mf::Fp4Spec s{.scale = mf::Fp4Scale::mxfp4, .tile_rows = 1, .tile_cols = 32, .packed = true};
  const Cast c = run(false, s, x, 1, 32);
  std::vector<uint16_t> d(32, 0xEEEE);
  mf::fp4_decode(s, c.codes.data(), c.scales.data(), 1, 32, d.data());
  EXPECT_EQ(d, c.dec);
}

TEST(Fp4Packed, ScaleValuesAreTheScaleFormats) {
  const mf::Format& e4m3 = mf::preset("e4m3fn");
  const mf::Format& e8m0 = mf::preset("e8m0");
  for (int c = 0; c < 256; ++c) {
    const float nv = mf::fp4_scale_value(mf::Fp4Scale::nvfp4, static_cast<uint8_t>(c));
    const float want = mf::decode_f32(e4m3, static_cast<uint32_t>(c));
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(nv)) << c;
    else EXPECT_EQ(nv, want) << c;
    const float mx = mf::fp4_scale_value(mf::Fp4Scale::mxfp4, static_cast<uint8_t>(c));
    const float want_mx = mf::decode_f32(e8m0, static_cast<uint32_t>(c));
    if (std::isnan(want_mx)) EXPECT_TRUE(std::isnan(mx)) << c;
    else EXPECT_EQ(mx, want_mx) << c;
  }
}

// The fused rotation gives the bits of hadamard16 followed by the plain cast,
// on both axes, every spec, vector and scalar paths.
TEST(Fp4Packed, FusedHadamardCastMatchesTheTwoPasses) {
  IsaGuard guard;
  const int64_t rows = 70, cols = 52;  // partial last groups along both axes
  const std::vector<float> x = heavy_tailed(static_cast<size_t>(rows * cols), 9);
  for (int axis : {1, 2})
    for (mf::Fp4Spec s : specs()) {
      if (axis == 1 && s.tile_rows == 1) continue;  // along rows the bands must hold whole groups
      SCOPED_TRACE(testing::Message() << "axis " << axis << " scale " << int(s.scale) << " tile " << s.tile_rows << "x"
                                      << s.tile_cols << " round " << int(s.rounding));
      std::vector<float> rotated(x.size());
      mf::hadamard16(x.data(), rotated.data(), rows, cols, axis, kSigns);
      const Cast want = run(true, s, rotated, rows, cols);
      s.rht_signs = kSigns;
      s.rht_axis = axis;
      for (cpu::Isa isa : {cpu::Isa::avx512_bf16_fp16, cpu::Isa::avx2, cpu::Isa::scalar}) {
        cpu::set_max_isa(isa);
        const Cast fused = run(false, s, x, rows, cols);
        EXPECT_EQ(fused.codes, want.codes);
        EXPECT_EQ(fused.scales, want.scales);
        EXPECT_EQ(fused.dec, want.dec);
        EXPECT_EQ(fused.r.tensor_scale, want.r.tensor_scale);
      }
      cpu::set_max_isa(cpu::Isa::avx512_bf16_fp16);
      const Cast ref = run(true, s, x, rows, cols);
      EXPECT_EQ(ref.dec, want.dec);
    }
}

// A tensor that overflows only once rotated is non-finite like the rotated
// copy: the pass-through decode is the rotated values in bf16.
TEST(Fp4Packed, FusedHadamardCastSeesOverflowOfTheRotation) {
  std::vector<float> x(16 * 16, 3e38f);
  const mf::Fp4Spec s{.tile_rows = 16, .tile_cols = 1, .rht_signs = kSigns, .rht_axis = 1};
  std::vector<float> rotated(x.size());
  mf::hadamard16(x.data(), rotated.data(), 16, 16, 1, kSigns);
  const Cast fused = run(false, s, x, 16, 16);
  mf::Fp4Spec plain = s;
  plain.rht_signs = nullptr;
  const Cast want = run(true, plain, rotated, 16, 16);
  EXPECT_TRUE(fused.r.nonfinite);
  EXPECT_TRUE(want.r.nonfinite);
  EXPECT_EQ(fused.dec, want.dec);
}

TEST(Fp4Packed, BadHadamardSpecsThrow) {
  std::vector<float> x(32, 1.0f);
  uint16_t d[32];
  EXPECT_THROW(mf::fp4_cast(mf::Fp4Spec{.tile_rows = 1, .rht_signs = kSigns, .rht_axis = 1}, x.data(), 2, 16, nullptr,
                            nullptr, d),
               std::invalid_argument);
  EXPECT_THROW(mf::fp4_cast(mf::Fp4Spec{.rht_signs = kSigns, .rht_axis = 3}, x.data(), 2, 16, nullptr, nullptr, d),
               std::invalid_argument);
  EXPECT_THROW(mf::hadamard16(x.data(), x.data(), 2, 16, 0, kSigns), std::invalid_argument);
}
