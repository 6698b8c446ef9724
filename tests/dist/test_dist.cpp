// Data-parallel training: the fp8/bf16 wire codecs against the scalar
// rounding reference, and, under `mpirun -np 2` (DistLaunch starts this same
// binary as the two ranks of DistWorker), bit-identity of a 2-rank run with
// one process accumulating the same micro-batches, on every rank, every step.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mantissa/data/text.hpp"
#include "mantissa/dist/group.hpp"
#include "mantissa/dist/reduce.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/train/session.hpp"
#include "dist/worker.hpp"

using namespace mantissa;
using namespace dist_test;

namespace {

// Reference fp8 wire value: the largest power-of-two scale 2^e keeping the
// block's amax <= the format's max, found by search; then the scalar
// reference rounding of x 2^e, divided by 2^e, all in double.
std::vector<double> fp8_reference(const std::vector<float>& x, int64_t block, const char* format) {
  const formats::Format f = formats::parse_format(format);
  std::vector<double> out(x.size());
  for (size_t b = 0; b < x.size(); b += static_cast<size_t>(block)) {
    double amax = 0;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[b + static_cast<size_t>(i)])));
    int e = 0;
    if (amax > 0)
      for (e = 127; e > -126 && std::ldexp(amax, e) > f.max(); --e) {
      }
    formats::RoundOptions ro;
    ro.saturate = true;
    for (int64_t i = 0; i < block; ++i) {
      const size_t k = b + static_cast<size_t>(i);
      out[k] = std::ldexp(formats::decode(f, formats::encode(f, std::ldexp(static_cast<double>(x[k]), e), ro)), -e);
    }
  }
  return out;
}

TEST(WireCodec, Fp8BlocksMatchTheScalarReference) {
  std::mt19937_64 rng(3);
  std::vector<float> x(4096);
  for (size_t i = 0; i < x.size(); ++i) {
    // Blocks spanning very different magnitudes: each gets its own scale.
    const int mag = static_cast<int>(i / 256) * 9 - 60;
    x[i] = std::ldexp(std::normal_distribution<float>()(rng), mag);
  }
  for (const char* fmt : {"e4m3fn", "e5m2"}) {
    const dist::WireCodec c(std::string(fmt) == "e5m2" ? dist::WireFormat::e5m2 : dist::WireFormat::e4m3, 128);
    ASSERT_EQ(c.encoded_bytes(4096), 4096u + 32u);
    std::vector<uint8_t> wire(c.encoded_bytes(4096));
    std::vector<float> back(x.size());
    c.encode(x.data(), wire.data(), 4096);
    c.decode(wire.data(), back.data(), 4096);
    const std::vector<double> ref = fp8_reference(x, 128, fmt);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(static_cast<double>(back[i]), ref[i]) << fmt << " at " << i;
  }
}

TEST(WireCodec, NonFiniteBlockDecodesToNaNAndBf16RoundsToNearestEven) {
  std::vector<float> x(256, 1.0f);
  x[200] = std::numeric_limits<float>::infinity();
  const dist::WireCodec c(dist::WireFormat::e4m3, 128);
  std::vector<uint8_t> wire(c.encoded_bytes(256));
  std::vector<float> back(256);
  c.encode(x.data(), wire.data(), 256);
  c.decode(wire.data(), back.data(), 256);
  EXPECT_EQ(back[0], 1.0f);
  for (size_t i = 128; i < 256; ++i) EXPECT_TRUE(std::isnan(back[i])) << i;

  const dist::WireCodec b(dist::WireFormat::bf16, 1);
  const std::vector<float> y = {1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -3.0f, 0x1p-130f};
  std::vector<uint8_t> w2(b.encoded_bytes(4));
  std::vector<float> yb(4);
  b.encode(y.data(), w2.data(), 4);
  b.decode(w2.data(), yb.data(), 4);
  EXPECT_EQ(yb[0], 1.0f);                 // tie to even
  EXPECT_EQ(yb[1], 1.0f + 0x1p-7f);       // above the tie
  EXPECT_EQ(yb[2], -3.0f);
  EXPECT_EQ(yb[3], 0x1p-130f);            // bf16 keeps fp32's subnormals' range
}

// One non-finite step leaves nothing behind, under every wire format, with
// and without error feedback, in both layouts: the next step's sum equals a
// fresh reducer's, bit for bit. 1000 + 37 values share their last fp8 block
// (and 16-value group) with the padding, which the NaN step's decode fills.
TEST(GradReducer, ANonFiniteStepDoesNotPoisonTheNext) {
  dist::Group& g = dist::Group::world();
  if (g.size() != 1) GTEST_SKIP() << "runs in one process";
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd;
  auto make = [](int64_t n) {
    autograd::Parameter p;
    p.value = Tensor::zeros({n}, DType::f32, MemoryKind::parameter);
    p.grad = Tensor::zeros({n}, DType::f32, MemoryKind::gradient);
    return p;
  };
  for (const char* fmt : {"fp32", "bf16", "fp8", "fp8-e5m2"})
    for (bool ef : {false, true})
      for (bool sharded : {false, true}) {
        const std::string where = std::string(fmt) + (ef ? " feedback" : "") + (sharded ? " sharded" : "");
        autograd::Parameter a = make(1000), b = make(37), fa = make(1000), fb = make(37);
        dist::CommOptions o;
        o.format = fmt;
        o.error_feedback = ef;
        dist::GradReducer used(g, {&a, &b}, o, sharded), fresh(g, {&fa, &fb}, o, sharded);
        ASSERT_GT(used.padded_size(), 1037) << where;
        b.grad.f32()[36] = std::numeric_limits<float>::infinity();
        sharded ? used.reduce_scatter(1.0) : used.reduce(1.0);
        ASSERT_TRUE(std::isnan(b.grad.f32()[36]) || std::isinf(b.grad.f32()[36])) << where;
        used.reset_feedback();  // what the trainer does after a skipped step
        for (autograd::Parameter* p : {&a, &b, &fa, &fb})
          for (int64_t i = 0; i < p->grad.numel(); ++i) p->grad.f32()[i] = 0;
        for (int64_t i = 0; i < 1000; ++i) a.grad.f32()[i] = fa.grad.f32()[i] = nd(rng);
        for (int64_t i = 0; i < 37; ++i) b.grad.f32()[i] = fb.grad.f32()[i] = nd(rng);
        sharded ? used.reduce_scatter(1.0) : used.reduce(1.0);
        sharded ? fresh.reduce_scatter(1.0) : fresh.reduce(1.0);
        for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(a.grad.f32()[i], fa.grad.f32()[i]) << where << " at " << i;
        for (int64_t i = 0; i < 37; ++i) {
          ASSERT_TRUE(std::isfinite(b.grad.f32()[i])) << where << " at " << i;
          ASSERT_EQ(b.grad.f32()[i], fb.grad.f32()[i]) << where << " at " << i;
        }
      }
}

TEST(WireCodec, BadFlagsAreNamed) {
  EXPECT_THROW(dist::parse_wire_format("fp16"), std::invalid_argument);
  dist::CommOptions o;
  o.block = 0;
  EXPECT_THROW(dist::validate(o), std::invalid_argument);
}

// ---- under mpirun ---------------------------------------------------------------

struct TrainRun {
  std::unique_ptr<nn::Model> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<data::TextWindows> train;
  std::unique_ptr<data::TextValidation> val;
  std::unique_ptr<train::Trainer> trainer;
};

// A small GPT trainer: batch rows per micro-batch, grad_accum micro-batches,
// data parallel over `group` when given.
TrainRun make_run(const data::TextCorpus& corpus, const train::TrainConfig& c, const recipe::Recipe& recipe, int64_t batch,
             int64_t accum, dist::Group* group, const dist::CommOptions& comm) {
  TrainRun r;
  r.model = train::make_model(c);
  r.opt = train::make_optimizer(c, *r.model, recipe);
  r.train = std::make_unique<data::TextWindows>(corpus, batch, c.seq_len, 7);
  r.val = std::make_unique<data::TextValidation>(corpus, 4, c.seq_len, 3);  // 3 batches: uneven over 2 ranks
  train::TrainerOptions to;
  to.grad_accum = accum;
  to.schedule.max_lr = 3e-3;
  to.schedule.min_lr = 3e-4;
  to.schedule.warmup_steps = 2;
  to.schedule.decay_steps = 20;
  to.amp.grad_clip = 1.0;
  to.group = group;
  to.comm = comm;
  r.trainer = std::make_unique<train::Trainer>(*r.model, *r.opt, *r.train, r.val.get(), recipe, to);
  return r;
}

train::TrainConfig small_gpt() {
  train::TrainConfig c;
  c.layers = 2;
  c.d_model = 32;
  c.heads = 2;
  c.seq_len = 16;
  return c;
}

TEST(DistWorker, TwoRanksEqualOneProcessAccumulatingEveryStep) {
  if (!is_worker()) GTEST_SKIP() << "runs under mpirun (DistLaunch)";
  dist::Group& g = dist::Group::world();
  ASSERT_EQ(g.size(), 2);
  const data::TextCorpus corpus = data::TextCorpus::from_bytes(corpus_text(), "test");
  const train::TrainConfig c = small_gpt();
  for (const char* recipe_name : {"bf16-amp", "fp16-amp"}) {
    const recipe::Recipe recipe = recipe::find_recipe(recipe_name);
    // Global batch 8: 2 ranks x 4 rows, against 1 process x 2 micro-batches of 4.
    TrainRun dp = make_run(corpus, c, recipe, 8, 1, &g, {});
    TrainRun ref = make_run(corpus, c, recipe, 4, 2, nullptr, {});
    for (int s = 0; s < 6; ++s) {
      const train::StepMetrics a = dp.trainer->train_step(), b = ref.trainer->train_step();
      ASSERT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(double)), 0) << recipe_name << " step " << s << ": " << a.loss << " vs " << b.loss;
      ASSERT_EQ(a.grad_norm, b.grad_norm) << recipe_name << " step " << s;
      ASSERT_EQ(a.skipped, b.skipped);
      ASSERT_EQ(a.targets, b.targets);
      const uint64_t h = weights_hash(*dp.model);
      ASSERT_EQ(h, weights_hash(*ref.model)) << recipe_name << " step " << s;
      for (uint64_t other : gathered(g, h)) ASSERT_EQ(other, h) << "ranks differ at step " << s;
      EXPECT_GT(a.comm_bytes, 0);
    }
    // Evaluation split across ranks adds the batches' sums in the same order.
    const train::EvalMetrics ea = dp.trainer->evaluate(), eb = ref.trainer->evaluate();
    EXPECT_EQ(std::memcmp(&ea.val_loss, &eb.val_loss, sizeof(double)), 0) << ea.val_loss << " vs " << eb.val_loss;
    EXPECT_EQ(ea.targets, eb.targets);
  }
}

TEST(DistWorker, LowPrecisionWireKeepsRanksIdenticalAndSkipsTogether) {
  if (!is_worker()) GTEST_SKIP() << "runs under mpirun (DistLaunch)";
  dist::Group& g = dist::Group::world();
  const data::TextCorpus corpus = data::TextCorpus::from_bytes(corpus_text(), "test");
  const train::TrainConfig c = small_gpt();
  recipe::Recipe recipe = recipe::find_recipe("fp16-amp");
  // Bytes sent per rank and step: 2 collectives x (ranks - 1) chunks of
  // half the parameters, padded to 16 values (fp8: 16 blocks of 128).
  const int64_t params = train::make_model(c)->parameter_count();
  auto chunk = [&](int64_t unit) { return ((params + 1) / 2 + unit - 1) / unit * unit; };
  for (const char* fmt : {"fp32", "bf16", "fp8", "fp8-e5m2"}) {
    dist::CommOptions comm;
    comm.format = fmt;
    comm.error_feedback = std::string(fmt) != "fp32";
    TrainRun dp = make_run(corpus, c, recipe, 8, 1, &g, comm);
    TrainRun ref = make_run(corpus, c, recipe, 4, 2, nullptr, {});
    for (int s = 0; s < 4; ++s) {
      const train::StepMetrics a = dp.trainer->train_step(), b = ref.trainer->train_step();
      EXPECT_NEAR(a.loss, b.loss, 0.02 * b.loss) << fmt << " step " << s;
      const uint64_t h = weights_hash(*dp.model);
      for (uint64_t other : gathered(g, h)) ASSERT_EQ(other, h) << fmt << ": ranks differ at step " << s;
      const std::string f = fmt;
      const int64_t expected = f == "fp32" ? 2 * 4 * chunk(16) : f == "bf16" ? 2 * 2 * chunk(16)
                                                                           : 2 * (chunk(2048) + chunk(2048) / 128);
      EXPECT_EQ(a.comm_bytes, expected) << fmt;
    }
  }
  // An overflowing gradient on ONE rank's rows makes every rank skip: a huge
  // static loss scale overflows fp16 gradients, the fp8 block turns NaN.
  recipe.loss_scale.method = recipe::ScalingMethod::static_scale;
  recipe.loss_scale.init_scale = 0x1p120;
  dist::CommOptions comm;
  comm.format = "fp8";
  comm.error_feedback = true;
  TrainRun dp = make_run(corpus, c, recipe, 8, 1, &g, comm);
  const uint64_t before = weights_hash(*dp.model);
  const train::StepMetrics a = dp.trainer->train_step();
  EXPECT_TRUE(a.skipped);
  EXPECT_EQ(weights_hash(*dp.model), before);
  std::vector<int> skipped(2);
  const int mine = a.skipped;
  g.allgather(&mine, skipped.data(), sizeof mine, "test skipped");
  EXPECT_EQ(skipped[0], 1);
  EXPECT_EQ(skipped[1], 1);
}

TEST(DistLaunch, TwoRankWorkersPass) {
  if (is_worker()) GTEST_SKIP();
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI or mpirun not installed (bash scripts/setup.sh)";
  EXPECT_EQ(launch_workers("DistWorker.*"), 0);
}

}  // namespace
