// The dynamic loss scaler against a hand-computed sequence (GradScaler's
// rules: back off and reset on overflow, grow after `interval` clean steps,
// clamp to [min, max]); static and none scaling; unscaling.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mantissa/amp/loss_scaler.hpp"

using namespace mantissa;
using namespace mantissa::amp;
using namespace mantissa::recipe;

TEST(LossScaler, DynamicStateMachineMatchesHandComputedSequence) {
  LossScaleConfig c;
  c.method = ScalingMethod::dynamic;
  c.init_scale = 8;
  c.growth_factor = 2;
  c.backoff_factor = 0.5;
  c.growth_interval = 3;
  c.min_scale = 1;
  c.max_scale = 32;
  LossScaler s(c);
  // (found_inf, scale after, tracker after), worked out by hand.
  struct Event {
    bool inf;
    double scale;
    int64_t tracker;
  };
  const Event seq[] = {
      {false, 8, 1}, {false, 8, 2}, {false, 16, 0},  // grow after 3 clean steps
      {false, 16, 1}, {true, 8, 0},                  // overflow: back off, reset tracker
      {false, 8, 1}, {false, 8, 2}, {false, 16, 0},  //
      {false, 16, 1}, {false, 16, 2}, {false, 32, 0},
      {false, 32, 1}, {false, 32, 2}, {false, 32, 0},  // clamped at max 32
      {true, 16, 0}, {true, 8, 0}, {true, 4, 0}, {true, 2, 0}, {true, 1, 0},
      {true, 1, 0},  // clamped at min 1
      {false, 1, 1},
  };
  EXPECT_EQ(s.scale(), 8);
  int64_t skipped = 0;
  for (size_t i = 0; i < std::size(seq); ++i) {
    s.update(seq[i].inf);
    skipped += seq[i].inf;
    EXPECT_EQ(s.scale(), seq[i].scale) << "event " << i;
    EXPECT_EQ(s.growth_tracker(), seq[i].tracker) << "event " << i;
  }
  EXPECT_EQ(s.skipped_steps(), skipped);
}

TEST(LossScaler, TorchDefaultsGrowAfter2000CleanSteps) {
  LossScaleConfig c;
  c.method = ScalingMethod::dynamic;
  LossScaler s(c);
  EXPECT_EQ(s.scale(), 65536.0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 65536.0);
}

TEST(LossScaler, StaticAndNoneKeepTheScaleButCountSkips) {
  LossScaleConfig c;
  c.method = ScalingMethod::static_scale;
  c.init_scale = 1024;
  LossScaler s(c);
  for (int i = 0; i < 5; ++i) s.update(i % 2 == 0);
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.skipped_steps(), 3);
  LossScaleConfig none;
  none.init_scale = 4096;  // ignored without scaling
  LossScaler n(none);
  n.update(true);
  EXPECT_EQ(n.scale(), 1);
}

TEST(LossScaler, UnscaleDividesOnceAndDetectsNonFinite) {
  autograd::Parameter a, b;
  a.grad = Tensor::from({4.0f, -8.0f, 3.0f}, {3}, MemoryKind::gradient);
  b.grad = Tensor::from({1.0f, 0.0f}, {2}, MemoryKind::gradient);
  LossScaleConfig c;
  c.method = ScalingMethod::static_scale;
  c.init_scale = 4;
  LossScaler s(c);
  EXPECT_TRUE(s.unscale_and_check({&a, &b}));
  EXPECT_EQ(a.grad.to_vector(), (std::vector<float>{1.0f, -2.0f, 0.75f}));
  EXPECT_EQ(b.grad.to_vector(), (std::vector<float>{0.25f, 0.0f}));
  b.grad.f32()[1] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(s.unscale_and_check({&a, &b}));
  b.grad.f32()[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(s.unscale_and_check({&a, &b}));
}

TEST(LossScaler, StateRoundTripsAndRejectsMismatch) {
  LossScaleConfig c;
  c.method = ScalingMethod::dynamic;
  c.growth_interval = 5;
  LossScaler s(c);
  s.update(true);
  s.update(false);
  s.update(false);
  LossScaler t(c);
  t.load_state_json(s.state_json());
  EXPECT_EQ(t.scale(), 32768.0);
  EXPECT_EQ(t.growth_tracker(), 2);
  EXPECT_EQ(t.skipped_steps(), 1);
  for (int i = 0; i < 3; ++i) {
    s.update(false);
    t.update(false);
  }
  EXPECT_EQ(t.scale(), s.scale());
  EXPECT_EQ(t.scale(), 65536.0);
  LossScaler none{LossScaleConfig{}};
  EXPECT_THROW(none.load_state_json(s.state_json()), std::invalid_argument);
  EXPECT_THROW(t.load_state_json("{not json"), std::invalid_argument);
}
