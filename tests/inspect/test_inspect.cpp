// The inspector's figures against float64 recomputations: SQNR, underflow,
// saturation, amax and scale of casts seen through the probe (unit and
// current FP8 scaling of matrix-product operands, 1-byte saves), with the
// expected casts found by brute force over every finite code of the format
// (the nearest value: saturating round-to-nearest for inputs that are not
// ties); the verdict rules; the --out directory rules.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "format_grid.hpp"
#include "train/toy_model.hpp"
#include "mantissa/autograd/tape.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/quant/fp8.hpp"
#include "mantissa/inspect/inspect.hpp"

using namespace mantissa;
namespace fs = std::filesystem;

namespace {

using format_grid::finite_values;
using format_grid::nearest;
using format_grid::saturation_threshold;

// Every finite value of a format, from its codes (the reference decoder).
struct Expected {
  double sqnr_db, underflow, saturation, amax;
};

// x cast as nearest(x / 2^e) x 2^e over the format's finite values.
Expected expected_cast(const std::vector<float>& x, const formats::Format& f, int e) {
  const std::vector<double> grid = finite_values(f);
  const double clip = saturation_threshold(grid);
  long double signal = 0, noise = 0;
  int64_t nonzero = 0, flushed = 0, saturated = 0;
  double amax = 0;
  for (float xf : x) {
    const double r = xf, q = std::ldexp(nearest(grid, std::ldexp(r, -e)), e);
    signal += static_cast<long double>(r) * r;
    noise += static_cast<long double>(r - q) * (r - q);
    amax = std::max(amax, std::fabs(r));
    if (r != 0) ++nonzero, flushed += q == 0;
    saturated += std::fabs(r) > std::ldexp(clip, e);
  }
  return {static_cast<double>(10 * std::log10(signal / noise)), static_cast<double>(flushed) / nonzero,
          static_cast<double>(saturated) / static_cast<double>(x.size()), amax};
}

// Signed values with log-uniform magnitudes in [2^lo, 2^hi], a few zeros.
std::vector<float> spread(size_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = i % 97 == 0 ? 0.0f : static_cast<float>((rng() & 1 ? -1 : 1) * std::exp2(u(rng)));
  return v;
}

std::shared_ptr<inspect::Probe> probe_with(toy::Bigram& model, quant::CastScaling scaling, DType saved,
                                         int64_t max_values = 0) {
  autograd::PrecisionPolicy p;
  quant::Fp8Config c;
  c.scaling = scaling;
  c.forward_format = mantissa::formats::parse_format("e4m3fn");
  c.backward_format = mantissa::formats::parse_format("e5m2");
  p.quantiser = std::make_shared<quant::Fp8Quantiser>(c);
  p.saved = saved;
  model.set_precision(p);
  auto probe = inspect::attach_probe(model, max_values);
  probe->set_active(true);
  return probe;
}

const std::pair<inspect::SiteInfo, inspect::CastTally>& only_site(const std::vector<std::pair<inspect::SiteInfo, inspect::CastTally>>& s) {
  EXPECT_EQ(s.size(), 1u);
  return s.front();
}

}  // namespace

TEST(InspectTally, HandValues) {
  // r = {1, -2, 0, 3, 4}, q = {1, -2, 0, 0, 4.5}: signal 30, noise 9.25;
  // one of four nonzero values flushed; |4| above the limit 3.5.
  const float r[] = {1, -2, 0, 3, 4}, q[] = {1, -2, 0, 0, 4.5f};
  inspect::CastTally t;
  inspect::tally(t, r, q, 5, 1, 3.5);
  EXPECT_DOUBLE_EQ(t.sqnr_db(), 10 * std::log10(30.0 / 9.25));
  EXPECT_DOUBLE_EQ(t.underflow(), 0.25);
  EXPECT_DOUBLE_EQ(t.saturation(), 0.2);
  EXPECT_EQ(t.amax, 4.0);
  EXPECT_EQ(t.exp_hist[static_cast<size_t>(0 - inspect::CastTally::kExpLo)], 1);  // 1
  EXPECT_EQ(t.exp_hist[static_cast<size_t>(1 - inspect::CastTally::kExpLo)], 2);  // 2, 3
  EXPECT_EQ(t.exp_hist[static_cast<size_t>(2 - inspect::CastTally::kExpLo)], 1);  // 4
  // An overflow to inf: SQNR -inf, counted as saturated; exact casts: +inf.
  const float inf_q[] = {1, std::numeric_limits<float>::infinity()}, r2[] = {1, 2};
  inspect::CastTally o;
  inspect::tally(o, r2, inf_q, 2, 1, 100);
  EXPECT_EQ(o.sqnr_db(), -std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(o.saturation(), 0.5);
  inspect::CastTally e;
  inspect::tally(e, r2, r2, 2, 1, 100);
  EXPECT_EQ(e.sqnr_db(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(inspect::sample_stride(1000, 100), 10);
  EXPECT_EQ(inspect::sample_stride(1000, 0), 1);
}

TEST(InspectProbe, UnitScaledGradientCastMatchesFloat64) {
  // Output gradients in E5M2 at scale 1: magnitudes 2^-24 .. 2^18 span
  // E5M2's subnormals (from 2^-16) and its max 57344, so some flush and some saturate.
  toy::Bigram model(4);
  auto probe = probe_with(model, quant::CastScaling::unit, DType::f32);
  const std::vector<float> x = spread(3000, -24, 18, 1);
  autograd::QuantSite site;
  site.key = model.parameters()[0];
  site.role = autograd::OperandRole::grad_output;
  Tensor decoded;
  model.precision().quantiser->quantise(Tensor::from(x, {30, 100}), 1, 30, 100, 2, site, &decoded);
  const auto sites = probe->take();
  const auto& [info, t] = only_site(sites);
  const Expected want = expected_cast(x, formats::preset("e5m2"), 0);
  EXPECT_EQ(info.name, "emb backward dY");
  EXPECT_EQ(info.format, "e5m2");
  EXPECT_NEAR(t.sqnr_db(), want.sqnr_db, 1e-9);
  EXPECT_DOUBLE_EQ(t.underflow(), want.underflow);
  EXPECT_DOUBLE_EQ(t.saturation(), want.saturation);
  EXPECT_GT(want.underflow, 0.05);
  EXPECT_GT(want.saturation, 0.05);
  EXPECT_EQ(t.amax, want.amax);
  EXPECT_EQ(t.scale_log2, 0);
  EXPECT_EQ(t.values, 3000);
}

TEST(InspectProbe, CurrentScaledActivationCastMatchesFloat64) {
  toy::Bigram model(4);
  auto probe = probe_with(model, quant::CastScaling::current, DType::f32);
  const std::vector<float> x = spread(2048, -30, -8, 2);
  autograd::QuantSite site;
  site.ordinal = 3;
  site.role = autograd::OperandRole::activation;
  Tensor decoded;
  model.precision().quantiser->quantise(Tensor::from(x, {2048}), 1, 16, 128, 2, site, &decoded);
  const auto sites = probe->take();
  const auto& [info, t] = only_site(sites);
  double amax = 0;
  for (float v : x) amax = std::max(amax, static_cast<double>(std::fabs(v)));
  const int e = quant::per_tensor_exponent(448, amax);
  const Expected want = expected_cast(x, formats::preset("e4m3fn"), e);
  EXPECT_EQ(info.name, "product3 forward X");
  EXPECT_EQ(t.scale_log2, e);
  EXPECT_NEAR(t.sqnr_db(), want.sqnr_db, 1e-9);
  EXPECT_DOUBLE_EQ(t.underflow(), want.underflow);
  EXPECT_EQ(t.saturation(), 0.0);
  EXPECT_EQ(want.saturation, 0.0);
}

TEST(InspectProbe, SavedActivationsAndSubsampling) {
  toy::Bigram model(4);
  auto probe = probe_with(model, quant::CastScaling::unit, DType::e4m3fn, 100);
  const std::vector<float> x = spread(1000, -12, 6, 3);
  autograd::OpContext ctx;
  ctx.policy = model.precision();
  autograd::Tape tape(ctx);
  const Tensor saved = tape.save_compact(Tensor::from(x, {1000}));
  const auto sites = probe->take();
  const auto& [info, t] = only_site(sites);
  const int e = static_cast<int>(std::lround(std::log2(saved.scale())));
  std::vector<float> every10;
  for (size_t i = 0; i < x.size(); i += 10) every10.push_back(x[i]);
  const Expected want = expected_cast(every10, formats::preset("e4m3fn"), e);
  EXPECT_EQ(info.kind, "saved");
  EXPECT_EQ(info.name, "save0 saved");
  EXPECT_EQ(t.values, 100);  // max_values 100 of 1000: every 10th
  EXPECT_EQ(t.scale_log2, e);
  EXPECT_NEAR(t.sqnr_db(), want.sqnr_db, 1e-9);
  EXPECT_DOUBLE_EQ(t.underflow(), want.underflow);
}

TEST(InspectProbe, InactiveProbeLooksAtNothing) {
  toy::Bigram model(4);
  auto probe = probe_with(model, quant::CastScaling::unit, DType::f32);
  probe->set_active(false);
  autograd::QuantSite site;
  site.role = autograd::OperandRole::activation;
  Tensor decoded;
  model.precision().quantiser->quantise(Tensor::from(std::vector<float>(64, 0.5f), {64}), 1, 8, 8, 2, site, &decoded);
  EXPECT_TRUE(probe->take().empty());
}

TEST(InspectVerdicts, FloorSaturationAndRanking) {
  inspect::VerdictOptions o;
  inspect::Verdicts v(o);
  const float r[] = {1, 2, 3, 4}, good[] = {1, 2, 3, 4.0625f}, flushed[] = {0, 0, 3, 4}, clipped[] = {1, 2, 3, 3.5f};
  inspect::SiteInfo a{"a backward dY", "matmul", "e5m2", 0x1p-16, 57344}, b = a, c = a;
  b.name = "b forward X";
  c.name = "c forward W";
  for (int64_t step = 1; step <= 3; ++step) {
    inspect::CastTally ta, tb, tc;
    inspect::tally(ta, r, flushed, 4, 1, 100);
    inspect::tally(tb, r, good, 4, 1, 100);
    inspect::tally(tc, r, clipped, 4, 1, 3.5);
    const auto fired = v.feed(step, {{a, ta}, {b, tb}, {c, tc}}, std::nullopt, {});
    if (step == 1) {
      ASSERT_EQ(fired.size(), 1u);  // a: 10 log10(30/5) = 7.8 dB < 10, half its values flushed: one line
      EXPECT_EQ(fired[0].site, "a backward dY");
      EXPECT_NE(fired[0].message.find("SQNR 7.8 dB"), std::string::npos) << fired[0].message;
      EXPECT_NE(fired[0].message.find("50.0% of nonzero values flushed"), std::string::npos) << fired[0].message;
    } else if (step == 3) {
      ASSERT_EQ(fired.size(), 1u);  // c saturated three sampled steps in a row
      EXPECT_EQ(fired[0].site, "c forward W");
    } else {
      EXPECT_TRUE(fired.empty());
    }
  }
  const auto ranked = v.ranking();
  ASSERT_EQ(ranked.size(), 3u);
  EXPECT_EQ(ranked[0].site, "a backward dY");
  EXPECT_EQ(ranked[1].site, "c forward W");
  EXPECT_DOUBLE_EQ(ranked[0].lost, 0.5);  // the underflow fraction
  EXPECT_DOUBLE_EQ(ranked[1].lost, 0.25);  // the saturation fraction (noise/signal 0.25/30 is less)
  EXPECT_EQ(ranked[2].site, "b forward X");
  // Update cosine collapse and a growing loss gap.
  inspect::Verdicts w(o);
  size_t fired = 0;
  for (int64_t step = 1; step <= 4; ++step) {
    inspect::ParamCompare p{"h0.w", 0.9, 0.1, 0.2, 1.0};
    fired += w.feed(step, {}, 0.01 * static_cast<double>(step + 1), {p}).size();
  }
  ASSERT_EQ(fired, 2u);
  EXPECT_EQ(w.warnings()[0].site, "h0.w");
  EXPECT_EQ(w.warnings()[1].site, "loss");
}

TEST(InspectOut, RefusesForeignDirectories) {
  const fs::path d = fs::temp_directory_path() / ("mantissa_inspect_out_" + std::to_string(::getpid()));
  fs::remove_all(d);
  inspect::prepare_out_dir((d / "new").string());  // created, marked
  EXPECT_TRUE(fs::exists(d / "new" / inspect::kInspectMarker));
  inspect::prepare_out_dir((d / "new").string());  // ours: reused
  fs::create_directories(d / "user");
  std::ofstream(d / "user" / "notes.txt") << "mine";
  EXPECT_THROW(inspect::prepare_out_dir((d / "user").string()), std::invalid_argument);
  EXPECT_TRUE(fs::exists(d / "user" / "notes.txt"));
  std::ofstream(d / "file") << "x";
  EXPECT_THROW(inspect::prepare_out_dir((d / "file").string()), std::invalid_argument);
  fs::remove_all(d);
}
