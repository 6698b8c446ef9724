// FP8 casts with power-of-two scales (quant/fp8.hpp) against direct
// computations: scale exponents by brute-force search over powers of two,
// each code against the nearest point of the format's grid found by scanning
// all 256 codes, MX / blockwise scales from each block's amax.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <tuple>
#include <limits>
#include <random>
#include <vector>

#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/quant/fp8.hpp"

using namespace mantissa;
using namespace mantissa::quant;

namespace {

// Largest k with amax * 2^k <= max, by scanning k (independent of the
// library's ilogb-based search).
int brute_shift(double max, double amax) {
  int best = -100000;
  for (int k = -300; k <= 300; ++k)
    if (std::ldexp(amax, k) <= max) best = k;
  return best;
}

// Values spread over many binades, with signs.
std::vector<float> spread(size_t n, uint64_t seed, double lo_exp, double hi_exp) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> e(lo_exp, hi_exp), u(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>((u(rng) < 0.5 ? -1 : 1) * std::exp2(e(rng)));
  return v;
}

// Nearest finite grid value of format f to y (ties: either neighbour), or +-max beyond.
double nearest_grid(const formats::Format& f, double y) {
  double best = 0, dist = std::numeric_limits<double>::infinity();
  for (uint32_t c = 0; c < 256; ++c) {
    if (formats::is_nan_code(f, c)) continue;
    const double v = formats::decode(f, c);
    if (!std::isfinite(v)) continue;
    if (std::fabs(v - y) < dist) {
      dist = std::fabs(v - y);
      best = v;
    }
  }
  return best;
}

void expect_on_grid(const formats::Format& f, const std::vector<float>& x, const std::vector<float>& got,
                    const std::vector<double>& scale_of) {
  for (size_t i = 0; i < x.size(); ++i) {
    const double y = x[i] / scale_of[i];
    const double want = nearest_grid(f, y) * scale_of[i];
    // A tie may go either way: accept either neighbour at exactly equal distance.
    if (static_cast<double>(got[i]) != want) {
      EXPECT_DOUBLE_EQ(std::fabs(got[i] - x[i]), std::fabs(want - x[i])) << "element " << i << " x=" << x[i];
    }
  }
}

}  // namespace

TEST(Fp8Scale, PerTensorExponentIsThePowerOfTwoOfMaxOverAmax) {
  const formats::Format e4 = formats::parse_format("e4m3fn"), e5 = formats::parse_format("e5m2");
  for (double amax : {448.0, 449.0, 896.0, 1.0, 0.75, 3e-5, 1e5, 57344.0, 57345.0, 1e-30}) {
    for (const auto* f : {&e4, &e5}) {
      const int want = -brute_shift(f->max(), amax);
      EXPECT_EQ(per_tensor_exponent(f->max(), amax), std::clamp(want, -126, 126)) << f->name << " amax " << amax;
      EXPECT_EQ(per_tensor_exponent(f->max(), amax, 2), std::clamp(want + 2, -126, 126)) << "margin 2";
      // The scaled amax fits and is within a factor 2 of max (rounding down the scale).
      const double scaled = std::ldexp(amax, -per_tensor_exponent(f->max(), amax));
      EXPECT_LE(scaled, f->max());
      EXPECT_GT(scaled * 2, f->max());
    }
  }
  EXPECT_EQ(per_tensor_exponent(448, 0.0), 0);
  EXPECT_EQ(per_tensor_exponent(448, std::numeric_limits<double>::infinity()), 0);
}

TEST(Fp8Scale, MxAndBlockwiseExponents) {
  const formats::Format e4 = formats::parse_format("e4m3fn");
  for (double amax : {1.0, 1.9, 448.0, 500.0, 3e-3, 1e20}) {
    int exp2 = 0;
    std::frexp(amax, &exp2);  // amax = m 2^exp2, m in [0.5, 1): floor(log2 amax) = exp2 - 1
    EXPECT_EQ(mx_exponent(e4, amax), exp2 - 1 - 8) << amax;  // emax(e4m3fn) = 8
    EXPECT_EQ(blockwise_exponent(448, amax), -brute_shift(448, amax)) << amax;
  }
  EXPECT_EQ(mx_exponent(e4, 0.0), -127);
  EXPECT_EQ(mx_exponent(e4, 1e-300), -127);  // clamped to E8M0's range
}

TEST(Fp8Cast, PerTensorCodesAreTheNearestScaledGridPoints) {
  const formats::Format f = formats::parse_format("e4m3fn");
  const std::vector<float> x = spread(3000, 1, -12, 6);
  Tensor t = Tensor::from(x, {30, 100});
  const Amax a = amax_of(x.data(), static_cast<int64_t>(x.size()));
  float want_amax = 0;
  for (float v : x) want_amax = std::max(want_amax, std::fabs(v));
  EXPECT_EQ(a.value, want_amax);
  EXPECT_FALSE(a.nonfinite);
  const int e = per_tensor_exponent(f.max(), a.value);
  int64_t saturated = -1;
  const auto q = cast_per_tensor(f, t, e, true, &saturated);
  EXPECT_EQ(q.codes.dtype(), DType::e4m3fn);
  EXPECT_EQ(q.codes.bytes(), x.size());  // one byte per value
  EXPECT_EQ(q.codes.scale(), std::ldexp(1.0f, e));
  EXPECT_EQ(saturated, 0);
  expect_on_grid(f, x, dequantised_values(q), std::vector<double>(x.size(), std::ldexp(1.0, e)));
}

TEST(Fp8Cast, SaturationIsCountedAndNonFiniteSurvives) {
  const formats::Format f = formats::parse_format("e4m3fn");
  Tensor t = Tensor::from({1.0f, 500.0f, -1000.0f, 2.0f}, {4});
  int64_t saturated = 0;
  auto q = cast_per_tensor(f, t, 0, true, &saturated);
  EXPECT_EQ(saturated, 2);
  EXPECT_EQ(dequantised_values(q), (std::vector<float>{1.0f, 448.0f, -448.0f, 2.0f}));
  Tensor bad = Tensor::from({1.0f, std::numeric_limits<float>::infinity(), 2.0f}, {3});
  EXPECT_TRUE(amax_of(bad.f32(), 3).nonfinite);
  q = cast_per_tensor(f, bad, 0, false);
  EXPECT_TRUE(std::isnan(dequantised_values(q)[1]));  // e4m3fn has no inf: NaN, never a finite max
}

TEST(Fp8Cast, MxBlocksAlongTheContractionDim) {
  const formats::Format f = formats::parse_format("e4m3fn");
  const int64_t rows = 5, cols = 70;  // 70 = 2 full blocks of 32 and a short one
  std::vector<float> x = spread(static_cast<size_t>(rows * cols), 2, -20, 10);
  const Tensor t = Tensor::from(x, {rows, cols});
  for (int axis : {2, 1}) {
    const int64_t tr = axis == 1 ? 32 : 1, tc = axis == 2 ? 32 : 1;
    CastReport report;
    const auto q = cast_blocks(f, t, 1, rows, cols, tr, tc, CastScaling::mx, &report);
    ASSERT_TRUE(q.blocks);
    EXPECT_EQ(q.codes.scale(), 1.0f);
    std::vector<double> scale_of(x.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        // The block of (r, c): amax over it, then OCP's floor(log2(amax)) - emax.
        const int64_t r0 = r / tr * tr, c0 = c / tc * tc;
        double m = 0;
        for (int64_t i = r0; i < std::min(rows, r0 + tr); ++i)
          for (int64_t j = c0; j < std::min(cols, c0 + tc); ++j) m = std::max(m, std::fabs(double(x[size_t(i * cols + j)])));
        int ex = 0;
        std::frexp(m, &ex);
        const int e = ex - 1 - 8;
        const int64_t tile = (r / tr) * q.blocks->tiles_across() + c / tc;
        EXPECT_EQ(q.blocks->exponents[size_t(tile)], e) << "axis " << axis << " r " << r << " c " << c;
        scale_of[size_t(r * cols + c)] = std::ldexp(1.0, e);
      }
    expect_on_grid(f, x, dequantised_values(q), scale_of);
  }
}

TEST(Fp8Cast, BlockwiseTilesNeverSaturate) {
  const formats::Format f = formats::parse_format("e4m3fn");
  const int64_t rows = 130, cols = 260;
  std::vector<float> x = spread(static_cast<size_t>(rows * cols), 3, -15, 12);
  const Tensor t = Tensor::from(x, {rows, cols});
  CastReport report;
  const auto q = cast_blocks(f, t, 1, rows, cols, 128, 128, CastScaling::blockwise, &report);
  EXPECT_EQ(report.saturated, 0);
  EXPECT_EQ(q.blocks->tiles_down(), 2);
  EXPECT_EQ(q.blocks->tiles_across(), 3);
  std::vector<double> scale_of(x.size());
  for (int64_t bi = 0; bi < 2; ++bi)
    for (int64_t bj = 0; bj < 3; ++bj) {
      double m = 0;
      for (int64_t i = bi * 128; i < std::min(rows, bi * 128 + 128); ++i)
        for (int64_t j = bj * 128; j < std::min(cols, bj * 128 + 128); ++j) m = std::max(m, std::fabs(double(x[size_t(i * cols + j)])));
      const int e = -brute_shift(448, m);
      EXPECT_EQ(q.blocks->exponents[size_t(bi * 3 + bj)], e);
      for (int64_t i = bi * 128; i < std::min(rows, bi * 128 + 128); ++i)
        for (int64_t j = bj * 128; j < std::min(cols, bj * 128 + 128); ++j) scale_of[size_t(i * cols + j)] = std::ldexp(1.0, e);
    }
  expect_on_grid(f, x, dequantised_values(q), scale_of);
}

// An output gradient is cast for its decode only (QuantSite::keep_codes):
// the same decode, scale, block exponents and totals as a full cast, and
// codes of shape [0].
TEST(Fp8Cast, DecodeOnlyCastsGiveTheFullCastsDecode) {
  const formats::Format f = formats::parse_format("e5m2");
  const int64_t rows = 64, cols = 200;
  std::vector<float> x = spread(static_cast<size_t>(rows * cols), 4, -30, 8);
  x[77] = 1e9f;  // saturates at scale 2^0
  const Tensor t = Tensor::from(x, {rows, cols});
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    ASSERT_EQ(a.numel(), b.numel());
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<uint16_t>()[i], b.data<uint16_t>()[i]) << i;
  };
  Tensor full, only;
  int64_t sat_full = 0, sat_only = 0;
  Amax a_full, a_only;
  const auto q = cast_per_tensor(f, t, -3, true, &sat_full, MemoryKind::activation, &full, &a_full);
  const auto d = cast_per_tensor(f, t, -3, true, &sat_only, MemoryKind::activation, &only, &a_only, false);
  EXPECT_EQ(d.codes.numel(), 0);
  EXPECT_EQ(d.codes.scale(), q.codes.scale());
  EXPECT_EQ(sat_only, sat_full);
  EXPECT_GT(sat_only, 0);
  EXPECT_EQ(a_only.value, a_full.value);
  same_bits(full, only);
  same_bits(full, decode_to_bf16(q));
  for (auto rule : {CastScaling::mx, CastScaling::blockwise}) {
    CastReport rf, ro;
    const auto bq = cast_blocks(f, t, 1, rows, cols, 1, 32, rule, &rf, MemoryKind::activation, &full);
    const auto bd = cast_blocks(f, t, 2, rows / 2, cols, 32, 1, rule, &ro, MemoryKind::activation, &only, false);
    const auto bt = cast_blocks(f, t, 2, rows / 2, cols, 32, 1, rule, &ro, MemoryKind::activation, nullptr);
    EXPECT_EQ(bd.codes.numel(), 0);
    EXPECT_EQ(bd.blocks->exponents, bt.blocks->exponents);
    same_bits(decode_to_bf16(bt), only);  // tall tiles (column maxima)
    const auto bd2 = cast_blocks(f, t, 1, rows, cols, 1, 32, rule, &ro, MemoryKind::activation, &only, false);
    same_bits(full, only);  // row tiles
    EXPECT_EQ(ro.saturated, rf.saturated);
    EXPECT_EQ(bd2.blocks->exponents, bq.blocks->exponents);
  }
  EXPECT_THROW(cast_per_tensor(f, t, 0, true, nullptr, MemoryKind::activation, nullptr, nullptr, false),
               std::invalid_argument);
  // Rows holding whole row tiles decode as one flat run of tiles: the same bits as the cast's decode.
  const Tensor w = Tensor::from(spread(static_cast<size_t>(300 * 256), 5, -25, 10), {300, 256});
  for (auto rule : {CastScaling::mx, CastScaling::blockwise}) {
    const int64_t tile = rule == CastScaling::mx ? 32 : 128;
    const auto wq = cast_blocks(f, w, 1, 300, 256, 1, tile, rule, nullptr, MemoryKind::activation, &full);
    same_bits(decode_to_bf16(wq), full);
  }
}

TEST(Fp8Cast, Bf16DecodeIsExactForEveryCode) {
  for (const char* name : {"e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"}) {
    const formats::Format f = formats::parse_format(name);
    Tensor codes = Tensor::empty({256}, cast_dtype(f));
    for (int c = 0; c < 256; ++c) codes.data<uint8_t>()[c] = static_cast<uint8_t>(c);
    autograd::QuantisedOperand q;
    q.codes = codes;
    const std::vector<float> v = dequantised_values(q);
    for (uint32_t c = 0; c < 256; ++c) {
      const double want = formats::decode(f, c);
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(v[c])) << name << " code " << c;
      else EXPECT_EQ(static_cast<double>(v[c]), want) << name << " code " << c;
    }
  }
  EXPECT_THROW(cast_dtype(formats::parse_format("e3m4")), std::invalid_argument);
}

namespace {
// bf16 bits -> value, and the value each code stands for, in float64.
double bf16_value(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
double code_value(const Tensor& codes, size_t i) {
  return formats::decode(formats::preset(dtype_format_name(codes.dtype())), codes.data<uint8_t>()[i]);
}
}  // namespace

// The decode a cast writes in the same pass (what the GEMM multiplies) is the
// codes' values with the block scales folded in, exactly: checked in float64
// against decode(code) x 2^E per element, and against decode_to_bf16.
TEST(Fp8Cast, FusedDecodeIsTheCodesValuesExactly) {
  const int64_t rows = 37, cols = 300;  // many 4096-chunks' tails and short tiles
  for (const char* name : {"e4m3fn", "e5m2"}) {
    const formats::Format f = formats::parse_format(name);
    std::vector<float> x = spread(static_cast<size_t>(rows * cols), 11, -18, 9);
    x[5] = 0.0f;
    x[6] = -0.0f;
    const Tensor t = Tensor::from(x, {rows, cols});
    Tensor dec;
    Amax a;
    int64_t saturated = 0;
    const auto q = cast_per_tensor(f, t, -8, true, &saturated, MemoryKind::activation, &dec, &a);
    ASSERT_EQ(dec.dtype(), DType::bf16);
    EXPECT_FALSE(a.nonfinite);
    EXPECT_GT(saturated, 0);  // 2^9 x 2^8 is beyond both formats max
    const Tensor ref = decode_to_bf16(q);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(dec.data<uint16_t>()[i], ref.data<uint16_t>()[i]) << name << " element " << i;
      ASSERT_EQ(bf16_value(dec.data<uint16_t>()[i]), code_value(q.codes, i)) << name << " element " << i;
    }
    for (auto [tr, tc, rule] : {std::tuple{int64_t{1}, int64_t{32}, CastScaling::mx},
                                std::tuple{int64_t{32}, int64_t{1}, CastScaling::mx},
                                std::tuple{int64_t{128}, int64_t{128}, CastScaling::blockwise},
                                std::tuple{int64_t{1}, int64_t{128}, CastScaling::blockwise}}) {
      CastReport report;
      const auto qb = cast_blocks(f, t, 1, rows, cols, tr, tc, rule, &report, MemoryKind::activation, &dec);
      const Tensor refb = decode_to_bf16(qb);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const auto i = static_cast<size_t>(r * cols + c);
          const int e = qb.blocks->exponents[static_cast<size_t>((r / tr) * qb.blocks->tiles_across() + c / tc)];
          ASSERT_EQ(dec.data<uint16_t>()[i], refb.data<uint16_t>()[i]) << name << " tile " << tr << "x" << tc;
          ASSERT_EQ(bf16_value(dec.data<uint16_t>()[i]), std::ldexp(code_value(qb.codes, i), e))
              << name << " tile " << tr << "x" << tc << " r " << r << " c " << c;
        }
    }
  }
}

// inf/NaN survive a saturating cast (the step must be seen to overflow), in
// the one-pass per-tensor cast and in row-tiled block casts alike.
TEST(Fp8Cast, NonFiniteSurvivesASaturatingCast) {
  const formats::Format f = formats::parse_format("e5m2");
  std::vector<float> x(5000, 1.0f);
  x[4097] = std::numeric_limits<float>::infinity();
  x[10] = 1e6f;  // finite, saturates only when the tensor is all finite
  const Tensor t = Tensor::from(x, {50, 100});
  Amax a;
  const auto q = cast_per_tensor(f, t, 0, true, nullptr, MemoryKind::activation, nullptr, &a);
  EXPECT_TRUE(a.nonfinite);
  const std::vector<float> v = dequantised_values(q);
  EXPECT_TRUE(std::isinf(v[4097]));
  EXPECT_TRUE(std::isinf(v[10]));  // not saturated: e5m2 overflows to inf
  CastReport report;
  const auto qb = cast_blocks(f, t, 1, 50, 100, 1, 32, CastScaling::mx, &report);
  EXPECT_TRUE(report.amax.nonfinite);
  EXPECT_TRUE(std::isinf(dequantised_values(qb)[4097]));
}

// Tile exponents (computed from the tiles' amax bits) equal mx_exponent and
// blockwise_exponent of the tile's amax at the binade edges: zero, fp32
// subnormals, the format's max and its neighbours, powers of two, fp32 max.
TEST(Fp8Cast, TileExponentsMatchTheScaleRulesAtBinadeEdges) {
  for (const char* name : {"e4m3fn", "e5m2"}) {
    const formats::Format f = formats::parse_format(name);
    const float fmax = static_cast<float>(f.max());
    const float up = std::numeric_limits<float>::infinity(), down = 0.0f;
    const std::vector<float> amaxes = {0.0f, std::numeric_limits<float>::denorm_min(), 3e-41f, 1.17e-38f,
                                       std::numeric_limits<float>::min(), fmax, std::nextafter(fmax, up),
                                       std::nextafter(fmax, down), 1.0f, std::nextafter(1.0f, down), 0x1.cp-3f,
                                       0x1.dp-3f, 3e5f, std::numeric_limits<float>::max()};
    for (auto [tr, tc, rule] : {std::tuple{int64_t{1}, int64_t{32}, CastScaling::mx},
                                std::tuple{int64_t{32}, int64_t{1}, CastScaling::mx},
                                std::tuple{int64_t{1}, int64_t{128}, CastScaling::blockwise},
                                std::tuple{int64_t{128}, int64_t{1}, CastScaling::blockwise},
                                std::tuple{int64_t{128}, int64_t{128}, CastScaling::blockwise}}) {
      // Tile k of every band has amax amaxes[k], at the tile's last element
      // (the others are halves of it).
      const int64_t tiles = static_cast<int64_t>(amaxes.size());
      const int64_t rows = tr == 1 ? 3 : tr, cols = tc * tiles;
      std::vector<float> x(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const bool last = (r % tr == tr - 1) && (c % tc == tc - 1);
          const float a = amaxes[static_cast<size_t>(c / tc)];
          x[static_cast<size_t>(r * cols + c)] = last ? -a : a * 0.5f;
        }
      const Tensor t = Tensor::from(x, {rows, cols});
      CastReport report;
      const auto q = cast_blocks(f, t, 1, rows, cols, tr, tc, rule, &report);
      for (int64_t i = 0; i < q.blocks->tiles_down(); ++i)
        for (int64_t k = 0; k < tiles; ++k) {
          const double a = amaxes[static_cast<size_t>(k)];
          const int want = rule == CastScaling::mx ? mx_exponent(f, a) : blockwise_exponent(f.max(), a);
          EXPECT_EQ(q.blocks->exponents[static_cast<size_t>(i * tiles + k)], want)
              << name << " tile " << tr << "x" << tc << " amax " << a;
        }
    }
  }
}
