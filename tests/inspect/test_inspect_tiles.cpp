// The inspector's block-scale figures and 16-bit save sites against float64
// recomputations written here from the formats' definitions: the tiles of
// an MX (e4m3fn, 1 x 32 blocks, E8M0 scales) and an NVFP4 (e2m1, 1 x 16
// blocks, E4M3 scales over an fp32 tensor scale) cast, each cast again here
// by nearest search over the format's values; bf16 saves rounded by integer
// arithmetic on the fp32 bits, fp16 saves by rounding to its spacing.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <random>

#include "format_grid.hpp"
#include "train/toy_model.hpp"
#include "mantissa/autograd/tape.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/quant/fp4.hpp"
#include "mantissa/quant/fp8.hpp"
#include "mantissa/inspect/inspect.hpp"

using namespace mantissa;

namespace {

using format_grid::finite_values;
using format_grid::nearest;
using format_grid::saturation_threshold;

using Sites = std::vector<std::pair<inspect::SiteInfo, inspect::CastTally>>;

double db(double signal, double noise) {
  if (noise == 0) return std::numeric_limits<double>::infinity();
  return 10 * std::log10(signal / noise);
}

// What the probe should report for a set of tiles, from (ref, q, scale) per tile.
struct TileWant {
  int64_t blocks = 0, floor = 0, ceiling = 0;
  std::vector<int> exps;
  double worst = std::numeric_limits<double>::infinity();
  void add(const std::vector<double>& r, const std::vector<double>& q, double scale, double fl, double ce) {
    double signal = 0, noise = 0;
    bool nonzero = false;
    for (size_t i = 0; i < r.size(); ++i) {
      signal += r[i] * r[i];
      noise += (r[i] - q[i]) * (r[i] - q[i]);
      nonzero |= r[i] != 0;
    }
    if (!nonzero) return;
    ++blocks;
    exps.push_back(static_cast<int>(std::floor(std::log2(scale))));
    floor += scale == fl;
    ceiling += scale == ce;
    worst = std::min(worst, db(signal, noise));
  }
  void check(const inspect::CastTally& t) const {
    std::vector<int> e = exps;
    std::sort(e.begin(), e.end());
    ASSERT_FALSE(e.empty());
    EXPECT_EQ(t.blocks, blocks);
    EXPECT_EQ(t.blocks_at_floor, floor);
    EXPECT_EQ(t.blocks_at_ceiling, ceiling);
    EXPECT_EQ(t.block_exp_min(), e.front());
    EXPECT_EQ(t.block_exp_max(), e.back());
    EXPECT_EQ(t.block_exp_median(), e[(e.size() - 1) / 2]);
    EXPECT_NEAR(t.worst_block_sqnr_db, worst, 1e-9);
  }
};

// Row r of [rows, cols]: log-uniform magnitudes in [2^lo[r], 2^hi[r]], random signs.
std::vector<float> rows_of(const std::vector<std::pair<double, double>>& ranges, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v;
  for (auto [lo, hi] : ranges) {
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t c = 0; c < cols; ++c)
      v.push_back(lo == hi ? 0.0f : static_cast<float>((rng() & 1 ? -1 : 1) * std::exp2(u(rng))));
  }
  return v;
}

const inspect::CastTally& only(const Sites& s) {
  EXPECT_EQ(s.size(), 1u);
  return s.front().second;
}

}  // namespace

TEST(InspectTiles, HandTiles) {
  // [2, 6] in 1 x 4 tiles: (0,0) 4 values, (0,1) 2, (1,0) zeros, (1,1) 2.
  const std::vector<double> r = {1, 2, 3, 4, 0.5, 0.25, 0, 0, 0, 0, 8, 8};
  const std::vector<double> q = {1, 2, 3, 5, 0.5, 0.5, 0, 0, 0, 1, 8, 0};
  autograd::TileScales s;
  s.rows = 2;
  s.cols = 6;
  s.tile_cols = 4;
  s.scale = {1.0f, 0x1p-9f, 448.0f, 0x1p-9f};
  s.floor = 0x1p-9;
  s.ceiling = 448;
  inspect::CastTally t;
  const auto at = [](const std::vector<double>& v) { return [&v](int64_t i) { return v[static_cast<size_t>(i)]; }; };
  inspect::tally_tiles(t, s, at(r), at(q), 0);
  // Tile (1,0) holds only zeros: left out. SQNR: 30/1, 0.3125/0.0625, 128/64.
  EXPECT_EQ(t.blocks, 3);
  EXPECT_EQ(t.blocks_at_floor, 2);
  EXPECT_EQ(t.blocks_at_ceiling, 0);
  EXPECT_EQ(t.block_exp_min(), -9);
  EXPECT_EQ(t.block_exp_median(), -9);
  EXPECT_EQ(t.block_exp_max(), 0);
  EXPECT_DOUBLE_EQ(t.worst_block_sqnr_db, 10 * std::log10(2.0));
  // At most 4 values: every 4th tile, i.e. tile 0 alone.
  inspect::CastTally one;
  inspect::tally_tiles(one, s, at(r), at(q), 4);
  EXPECT_EQ(one.blocks, 1);
  EXPECT_DOUBLE_EQ(one.worst_block_sqnr_db, 10 * std::log10(30.0));
  s.scale.pop_back();
  EXPECT_THROW(inspect::tally_tiles(one, s, at(r), at(q), 0), std::logic_error);
}

TEST(InspectTiles, MxTilesMatchFloat64) {
  // 8 rows x 64 columns in 1 x 32 blocks along the contraction: rows of
  // different magnitudes, one of zeros, one so small (2^-124..2^-121) that
  // OCP's exponent floor(log2 amax) - 8 falls below E8M0's 2^-127 and is clamped.
  toy::Bigram model(4);
  autograd::PrecisionPolicy p;
  quant::Fp8Config c;
  c.scaling = quant::CastScaling::mx;
  c.forward_format = mantissa::formats::parse_format("e4m3fn");
  c.backward_format = mantissa::formats::parse_format("e5m2");
  p.quantiser = std::make_shared<quant::Fp8Quantiser>(c);
  model.set_precision(p);
  auto probe = inspect::attach_probe(model, 0);
  probe->set_active(true);
  const int64_t rows = 8, cols = 64;
  const std::vector<float> x = rows_of(
      {{-3, 2}, {-20, -4}, {0, 0}, {-124, -121}, {4, 9}, {-12, -11}, {-1, 6}, {-30, -10}}, cols, 7);
  autograd::QuantSite site;
  site.role = autograd::OperandRole::activation;
  Tensor decoded;
  model.precision().quantiser->quantise(Tensor::from(x, {rows, cols}), 1, rows, cols, 2, site, &decoded);
  const Sites sites = probe->take();
  const inspect::CastTally& t = only(sites);
  EXPECT_EQ(sites.front().first.format, "e4m3fn");

  const formats::Format& f = formats::preset("e4m3fn");
  const std::vector<double> grid = finite_values(f);
  TileWant want;
  long double signal = 0, noise = 0;
  int64_t saturated = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 32; ++b) {
      std::vector<double> ref, q;
      double amax = 0;
      for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[r * cols + b * 32 + j])));
      const int e = amax > 0 ? std::clamp(static_cast<int>(std::floor(std::log2(amax))) - 8, -127, 127) : -127;
      for (int64_t j = 0; j < 32; ++j) {
        const double v = x[r * cols + b * 32 + j];
        ref.push_back(v);
        q.push_back(std::ldexp(nearest(grid, std::ldexp(v, -e)), e));
        signal += v * v;
        noise += (v - q.back()) * (v - q.back());
        saturated += std::fabs(v) > std::ldexp(saturation_threshold(grid), e);  // 464 x 2^e
      }
      want.add(ref, q, std::ldexp(1.0, e), 0x1p-127, 0x1p127);
    }
  want.check(t);
  EXPECT_EQ(want.blocks, 14);   // the zero row's two tiles left out
  EXPECT_EQ(want.floor, 2);     // the tiny row's
  EXPECT_NEAR(t.sqnr_db(), static_cast<double>(10 * std::log10(signal / noise)), 1e-9);
  EXPECT_EQ(t.saturated, saturated);
  EXPECT_EQ(t.scale_log2, 0);

  // The table and the cause name the tiles' scales.
  inspect::Verdicts v;
  v.feed(1, sites, std::nullopt, {});
  const auto ranked = v.ranking();
  ASSERT_EQ(ranked.size(), 1u);
  EXPECT_EQ(ranked[0].tiles.blocks, 14);
  const std::string table = inspect::ranking_table(ranked, 1);
  const std::string range = std::to_string(t.block_exp_min()) + "|" + std::to_string(t.block_exp_median()) + "|" +
                            std::to_string(t.block_exp_max());
  EXPECT_NE(table.find(range), std::string::npos) << table;
  EXPECT_NE(ranked[0].cause.find("tile scales 2^-127..2^"), std::string::npos) << ranked[0].cause;
}

TEST(InspectTiles, Nvfp4TilesMatchFloat64) {
  // 4 rows x 64 in 1 x 16 blocks: the tensor's amax sets the fp32 tensor
  // scale t = amax / (6 x 448), so its tile's E4M3 scale is 448 (ceiling);
  // a row 2^-25 below it needs less than E4M3's smallest 2^-9 (floor).
  autograd::Parameter w;
  w.name = "h0.mlp.fc.weight";
  w.block = 0;
  quant::Fp4Config c;
  c.backward = false;
  c.rht = quant::RhtMode::none;
  toy::Bigram model(4);
  autograd::PrecisionPolicy p;
  p.quantiser = std::make_shared<quant::Fp4Quantiser>(c);
  model.set_precision(p);
  auto probe = inspect::attach_probe(model, 0);
  probe->set_active(true);
  const int64_t rows = 4, cols = 64;
  const std::vector<float> x = rows_of({{-4, 1}, {-28, -24}, {-10, -2}, {-2, 0}}, cols, 9);
  autograd::QuantSite site;
  site.key = &w;
  site.role = autograd::OperandRole::activation;
  Tensor decoded;
  model.precision().quantiser->quantise(Tensor::from(x, {rows, cols}), 1, rows, cols, 2, site, &decoded);
  const Sites sites = probe->take();
  const inspect::CastTally& t = only(sites);
  EXPECT_EQ(sites.front().first.format, "e2m1fn");

  // The definitions in float, as the format states them (formats/fp4.hpp).
  const std::vector<double> e4m3 = finite_values(formats::preset("e4m3fn"));
  const std::vector<double> e2m1 = {-6, -4, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4, 6};
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float ts = std::max(amax / (6.0f * 448.0f), 0x1p-117f);
  TileWant want;
  long double signal = 0, noise = 0;
  int64_t saturated = 0;  // beyond 7 x s x t, where e2m1 would round above 6
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 16; ++b) {
      float amax_b = 0;
      for (int64_t j = 0; j < 16; ++j) amax_b = std::max(amax_b, std::fabs(x[r * cols + b * 16 + j]));
      const float s = static_cast<float>(nearest(e4m3, std::clamp((amax_b / 6.0f) / ts, 0x1p-9f, 448.0f)));
      std::vector<double> ref, q;
      for (int64_t j = 0; j < 16; ++j) {
        const float v = x[r * cols + b * 16 + j];
        const float code = static_cast<float>(nearest(e2m1, std::clamp(v / (ts * s), -6.0f, 6.0f)));
        ref.push_back(v);
        q.push_back(code * s * ts);
        saturated += std::fabs(v) > 7.0 * s * ts;
        signal += static_cast<long double>(v) * v;
        noise += (v - q.back()) * (v - q.back());
      }
      want.add(ref, q, s, 0x1p-9, 448);
    }
  want.check(t);
  EXPECT_EQ(want.blocks, 16);
  EXPECT_EQ(want.floor, 4);
  EXPECT_GE(want.ceiling, 1);
  EXPECT_EQ(saturated, 0);  // the E4M3 scale, rounded down, leaves the block max below 6 x 17/16
  EXPECT_EQ(t.saturated, saturated);
  EXPECT_NEAR(t.sqnr_db(), static_cast<double>(10 * std::log10(signal / noise)), 1e-9);
  EXPECT_EQ(t.scale_log2, static_cast<int>(std::lround(std::log2(ts))));
}

TEST(InspectSaves, SixteenBitSavesMatchFloat64) {
  // x spans 2^-30 .. 2^14: bf16 keeps every magnitude (8 bits of precision,
  // about 50 dB), fp16 flushes those below half its smallest subnormal 2^-24.
  const auto bf16 = [](float v) {
    uint32_t u = std::bit_cast<uint32_t>(v);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return static_cast<double>(std::bit_cast<float>(u));
  };
  // fp16: 11 significant bits, spacing 2^(max(e, -14) - 10) for |v| in [2^e, 2^(e+1)); nearbyint ties to even.
  const auto fp16 = [](float v) {
    if (v == 0) return 0.0;
    const double ulp = std::ldexp(1.0, std::max(std::ilogb(v), -14) - 10);
    return std::nearbyint(v / ulp) * ulp;
  };
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-30, 14);
  std::vector<float> x(3000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 101 == 0 ? 0.0f : static_cast<float>((rng() & 1 ? -1 : 1) * std::exp2(u(rng)));
  for (DType d : {DType::bf16, DType::f16}) {
    toy::Bigram model(4);
    autograd::PrecisionPolicy p;
    p.saved = d;
    model.set_precision(p);
    auto probe = inspect::attach_probe(model, 1000);  // every 3rd value
    probe->set_active(true);
    autograd::OpContext ctx;
    ctx.policy = model.precision();
    autograd::Tape tape(ctx);
    const Tensor kept = tape.save(Tensor::from(x, {3000}));
    tape.save(Tensor::from(x, {3000}));
    EXPECT_EQ(kept.dtype(), d);
    const Sites sites = probe->take();
    ASSERT_EQ(sites.size(), 2u);  // two save sites, told apart by their order
    EXPECT_EQ(sites[0].first.name, "copy0 saved");
    EXPECT_EQ(sites[1].first.name, "copy1 saved");
    const auto& [info, t] = sites[0];
    EXPECT_EQ(info.kind, "saved");
    EXPECT_EQ(info.format, d == DType::bf16 ? "bf16" : "fp16");
    long double signal = 0, noise = 0;
    int64_t nonzero = 0, flushed = 0;
    for (size_t i = 0; i < x.size(); i += 3) {
      const double r = x[i], q = d == DType::bf16 ? bf16(x[i]) : fp16(x[i]);
      signal += r * r;
      noise += (r - q) * (r - q);
      nonzero += r != 0;
      flushed += r != 0 && q == 0;
    }
    EXPECT_EQ(t.values, 1000);
    EXPECT_NEAR(t.sqnr_db(), static_cast<double>(10 * std::log10(signal / noise)), 1e-9);
    EXPECT_DOUBLE_EQ(t.underflow(), static_cast<double>(flushed) / static_cast<double>(nonzero));
    EXPECT_EQ(t.saturated, 0);
    if (d == DType::f16) {
      EXPECT_GT(t.underflow(), 0.05);
    } else {
      EXPECT_EQ(flushed, 0);
    }
  }
}
