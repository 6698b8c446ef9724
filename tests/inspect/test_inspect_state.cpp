// Optimizer-state cast sites: Adam moments stored in e4m3fn (m) and fp16 (v)
// are reported per parameter and moment with SQNR, underflow and saturation
// recomputed here in float64 from the scalar format codec (encode/decode)
// and the power-of-two scale rule, on gradients spanning 2^-30 .. 1; the
// same sites under train --watch, over an even stride of each moment.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "mantissa/formats/round.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/inspect/inspect.hpp"
#include "train/toy_model.hpp"

using namespace mantissa;

namespace {

// The power of two 2^e, e minimal, with amax / 2^e <= max.
double ref_scale(double amax, double fmt_max) {
  int e = 0;
  std::frexp(amax / fmt_max, &e);
  if (std::ldexp(fmt_max, e - 1) >= amax) --e;
  return std::ldexp(1.0, e);
}

struct Expected {
  double sqnr_db = 0, underflow = 0, saturation = 0;
  int scale_log2 = 0;
};

// Figures of rounding ref into f at the scale its amax calls for, in float64.
Expected expected(const std::vector<float>& ref, const formats::Format& f) {
  double amax = 0;
  for (float r : ref) amax = std::max(amax, std::fabs(static_cast<double>(r)));
  const double s = ref_scale(amax, f.max());
  double signal = 0, noise = 0;
  int64_t nonzero = 0, flushed = 0, saturated = 0;
  for (float r : ref) {
    const double q = formats::decode(f, formats::encode(f, r / s)) * s;
    signal += static_cast<double>(r) * r;
    noise += (r - q) * (r - q);
    nonzero += r != 0;
    flushed += r != 0 && q == 0;
    saturated += std::fabs(r) > f.max() * s;
  }
  return {10 * std::log10(signal / noise), static_cast<double>(flushed) / static_cast<double>(nonzero),
          static_cast<double>(saturated) / static_cast<double>(ref.size()), static_cast<int>(std::lround(std::log2(s)))};
}

}  // namespace

TEST(InspectOptimizerState, AdamMomentSitesMatchFloat64) {
  toy::Bigram model(40);
  auto probe = inspect::attach_probe(model, 0);  // every value
  probe->set_active(true);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> e(-30, 0);
  std::vector<std::vector<double>> grads;
  for (autograd::Parameter* p : model.parameters()) {
    grads.emplace_back();
    for (int64_t i = 0; i < p->grad.numel(); ++i) {
      const double g = (rng() & 1 ? 1 : -1) * std::exp2(e(rng));
      p->grad.f32()[i] = static_cast<float>(g);
      grads.back().push_back(static_cast<float>(g));
    }
  }
  optim::OptimizerConfig c;
  c.type = "adam";
  c.state_format = optim::parse_state_format("e4m3fn/fp16");
  auto opt = optim::make_optimizer(c, model.parameters());
  auto* adam = dynamic_cast<optim::Adam*>(opt.get());
  ASSERT_NE(adam, nullptr);
  std::map<std::string, std::vector<float>> refs;
  adam->set_state_observer([&](const optim::Adam::StateCast& s) {
    probe->tally_state(s);
    refs[s.param->name + " " + s.moment].assign(s.ref, s.ref + s.n);
  });
  adam->step(1e-3);
  const auto sites = probe->take();
  ASSERT_EQ(sites.size(), 4u);  // 2 parameters x 2 moments
  const auto& fm = formats::preset("e4m3fn");
  const auto& fv = formats::preset("fp16");
  size_t k = 0;
  for (autograd::Parameter* p : model.parameters()) {
    for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
      const std::string name = p->name + " " + moment;
      const auto it = std::find_if(sites.begin(), sites.end(), [&](const auto& s) { return s.first.name == name; });
      ASSERT_NE(it, sites.end()) << name;
      const auto& [info, t] = *it;
      const bool m = std::string(moment) == "exp_avg";
      EXPECT_EQ(info.kind, "optimizer state");
      EXPECT_EQ(info.format, m ? "e4m3fn" : "fp16");
      // The reference is the unrounded first-step moment: 0.1 g or 0.001 g^2.
      const std::vector<float>& ref = refs.at(name);
      ASSERT_EQ(ref.size(), grads[k].size());
      for (size_t i = 0; i < ref.size(); ++i) {
        const double g = grads[k][i], want = m ? 0.1 * g : 0.001 * g * g;
        ASSERT_NEAR(ref[i], want, 1e-6 * std::fabs(want)) << name << " " << i;
      }
      const Expected x = expected(ref, m ? fm : fv);
      EXPECT_EQ(t.values, static_cast<int64_t>(ref.size()));
      EXPECT_NEAR(t.sqnr_db(), x.sqnr_db, 1e-9) << name;
      EXPECT_DOUBLE_EQ(t.underflow(), x.underflow) << name;
      EXPECT_DOUBLE_EQ(t.saturation(), x.saturation) << name;
      EXPECT_EQ(t.scale_log2, x.scale_log2) << name;
      // 0.1 x 2^-30 .. 0.1 spans 2^30, beyond e4m3fn's 2^17 (subnormals included): values flush.
      if (m) {
        EXPECT_GT(x.underflow, 0.2) << name;
      }
    }
    ++k;
  }
  // No observer: no sites, and fp32 moments are never observed.
  adam->set_state_observer({});
  adam->step(1e-3);
  EXPECT_TRUE(probe->take().empty());
}

TEST(InspectOptimizerState, WatchSamplesMomentSitesEvenly) {
  // train --watch with e4m3fn/fp16 moments: the sites of a probed step,
  // over an even stride of the moments (1600 elements at 100 values: every
  // 16th), against the full moments a second, identical run reports.
  toy::Bigram watched(40), full(40);
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> e(-30, 0);
  for (size_t k = 0; k < 2; ++k)
    for (int64_t i = 0; i < watched.parameters()[k]->grad.numel(); ++i) {
      const float g = static_cast<float>((rng() & 1 ? 1 : -1) * std::exp2(e(rng)));
      watched.parameters()[k]->grad.f32()[i] = full.parameters()[k]->grad.f32()[i] = g;
    }
  optim::OptimizerConfig c;
  c.type = "adam";
  c.state_format = optim::parse_state_format("e4m3fn/fp16");
  auto opt_w = optim::make_optimizer(c, watched.parameters()), opt_f = optim::make_optimizer(c, full.parameters());
  std::map<std::string, std::pair<std::vector<float>, float>> refs;  // full moment, its scale
  dynamic_cast<optim::Adam*>(opt_f.get())->set_state_observer([&](const optim::Adam::StateCast& s) {
    EXPECT_EQ(s.stride, 1);
    refs[s.param->name + " " + s.moment] = {std::vector<float>(s.ref, s.ref + s.n), s.scale};
  });
  opt_f->step(1e-3);

  inspect::Watch watch(watched, 1, 100, {}, nullptr, opt_w.get());
  watch.before_step(1);
  opt_w->step(1e-3);
  watch.after_step(1);
  const auto ranked = watch.verdicts().ranking();
  ASSERT_EQ(ranked.size(), 4u);
  for (const auto& [name, ref_scale] : refs) {
    const auto it = std::find_if(ranked.begin(), ranked.end(), [&](const auto& r) { return r.site == name; });
    ASSERT_NE(it, ranked.end()) << name;
    const bool m = name.ends_with("exp_avg");
    const formats::Format& f = formats::preset(m ? "e4m3fn" : "fp16");
    const std::vector<float>& ref = ref_scale.first;
    const double s = ref_scale.second;
    const size_t stride = ref.size() > 100 ? (ref.size() + 99) / 100 : 1;
    double signal = 0, noise = 0;
    int64_t nonzero = 0, flushed = 0, n = 0;
    for (size_t i = 0; i < ref.size(); i += stride, ++n) {
      const double r = ref[i], q = formats::decode(f, formats::encode(f, ref[i] / s)) * s;
      signal += r * r;
      noise += (r - q) * (r - q);
      nonzero += r != 0;
      flushed += r != 0 && q == 0;
    }
    EXPECT_EQ(n, ref.size() > 100 ? 100 : static_cast<int64_t>(ref.size())) << name;
    EXPECT_EQ(it->kind, "optimizer state");
    EXPECT_NEAR(it->sqnr_db, 10 * std::log10(signal / noise), 1e-9) << name;
    EXPECT_DOUBLE_EQ(it->underflow, static_cast<double>(flushed) / static_cast<double>(nonzero)) << name;
    EXPECT_EQ(it->scale_log2, static_cast<int>(std::lround(std::log2(s)))) << name;
  }
  // Steps the watch does not probe leave the optimizer without an observer.
  inspect::Watch every2(watched, 2, 100, {}, nullptr, opt_w.get());
  every2.before_step(2);
  opt_w->step(1e-3);
  every2.after_step(2);
  EXPECT_TRUE(every2.verdicts().ranking().empty());
}
