// Sharded optimizer state (ZeRO stage 1) under `mpirun -np 2` (ShardLaunch
// starts this binary as the two ranks of ShardWorker): a sharded run against
// the unsharded 2-rank run and one process accumulating the same
// micro-batches, bit for bit (loss, gradient norm, a hash of every weight on
// every rank), with loss scaling, skipped steps and clipping; its memory
// against a count of the parameters; checkpoints across rank counts and
// sharded <-> unsharded; error-feedback residuals in checkpoints; a study
// (`mantissa experiment`) whose runs train data-parallel while only rank 0
// writes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "mantissa/data/text.hpp"
#include "mantissa/dist/group.hpp"
#include "mantissa/dist/reduce.hpp"
#include "mantissa/study/experiment.hpp"
#include "mantissa/train/session.hpp"
#include "dist/worker.hpp"

using namespace mantissa;
using namespace dist_test;
namespace fs = std::filesystem;

namespace {

// A failed assertion on one rank leaves the other waiting in a collective:
// a short deadline ends such a job in seconds instead of minutes.
dist::Group& worker_group() {
  dist::Group& g = dist::Group::world();
  g.set_timeout(120);
  return g;
}

// d_model 96: the embedding (256 x 96) and the MLP matrices (96 x 384) span
// several optimizer chunks of 16384, so shards cut inside parameters.
train::TrainConfig shard_gpt() {
  train::TrainConfig c;
  c.layers = 2;
  c.d_model = 96;
  c.heads = 2;
  c.seq_len = 16;
  return c;
}

struct TrainRun {
  std::unique_ptr<nn::Model> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<data::TextWindows> train;
  std::unique_ptr<train::Trainer> trainer;
};

struct RunSetup {
  recipe::Recipe recipe;
  int64_t batch = 8, accum = 1;
  dist::Group* group = nullptr;
  bool shard = false;
  dist::CommOptions comm;
  double clip = 1.0;
};

TrainRun make_run(const data::TextCorpus& corpus, const RunSetup& s) {
  const train::TrainConfig c = shard_gpt();
  TrainRun r;
  r.model = train::make_model(c);
  r.opt = train::make_optimizer(c, *r.model, s.recipe);
  r.train = std::make_unique<data::TextWindows>(corpus, s.batch, c.seq_len, 11);
  train::TrainerOptions to;
  to.grad_accum = s.accum;
  to.schedule.max_lr = 3e-3;
  to.schedule.min_lr = 3e-4;
  to.schedule.warmup_steps = 2;
  to.schedule.decay_steps = 20;
  to.amp.grad_clip = s.clip;
  to.group = s.group;
  to.comm = s.comm;
  to.shard_optimizer = s.shard;
  r.trainer = std::make_unique<train::Trainer>(*r.model, *r.opt, *r.train, nullptr, s.recipe, to);
  return r;
}

std::string bits(double v) {
  uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  return std::to_string(u);
}

// Steps a and b side by side; every step's loss, gradient norm, skip flag and
// weights must agree bit for bit, and a's weights must be the same on every rank.
void expect_same_steps(TrainRun& a, TrainRun& b, int steps, dist::Group& g, const std::string& what) {
  for (int s = 0; s < steps; ++s) {
    const train::StepMetrics x = a.trainer->train_step(), y = b.trainer->train_step();
    ASSERT_EQ(bits(x.loss), bits(y.loss)) << what << " step " << s << ": loss " << x.loss << " vs " << y.loss;
    ASSERT_EQ(bits(x.grad_norm), bits(y.grad_norm)) << what << " step " << s << ": grad norm " << x.grad_norm << " vs " << y.grad_norm;
    ASSERT_EQ(x.skipped, y.skipped) << what << " step " << s;
    const uint64_t h = weights_hash(*a.model);
    ASSERT_EQ(h, weights_hash(*b.model)) << what << " step " << s;
    for (uint64_t other : gathered(g, h)) ASSERT_EQ(other, h) << what << ": ranks differ at step " << s;
  }
}

int64_t numel_where(nn::Model& m, bool (*keep)(const autograd::Parameter&)) {
  int64_t n = 0;
  for (autograd::Parameter* p : m.parameters())
    if (keep(*p)) n += p->value.numel();
  return n;
}

TEST(ShardWorker, ShardedEqualsUnshardedAndAccumulationWithScalingSkipsAndClipping) {
  if (!is_worker()) GTEST_SKIP() << "runs under mpirun (ShardLaunch)";
  dist::Group& g = worker_group();
  ASSERT_EQ(g.size(), 2);
  const data::TextCorpus corpus = data::TextCorpus::from_bytes(corpus_text(), "test");
  struct Case {
    recipe::Recipe recipe;
    double clip;
    double init_scale;  // > 0: a dynamic loss scale this large overflows fp16 first (skipped steps)
  };
  recipe::Recipe master_nearest = recipe::find_recipe("bf16-master-sr");  // fp32 masters of bf16 weights
  master_nearest.weight_rounding = recipe::WeightRounding::nearest;
  for (const Case& k : {Case{recipe::find_recipe("bf16-amp"), 1.0, 0}, Case{recipe::find_recipe("fp16-amp"), 1.0, 0x1p24},
                        Case{recipe::find_recipe("fp16-master"), 0.05, 0}, Case{master_nearest, 1.0, 0}}) {
    const char* name = k.recipe.name.c_str();
    RunSetup s;
    s.recipe = k.recipe;
    if (k.init_scale > 0) s.recipe.loss_scale.init_scale = k.init_scale;
    s.clip = k.clip;
    s.group = &g;
    s.shard = true;
    TrainRun sharded = make_run(corpus, s);
    s.shard = false;
    TrainRun whole = make_run(corpus, s);
    RunSetup one = s;
    one.group = nullptr;
    one.batch = 4;
    one.accum = 2;
    TrainRun accum = make_run(corpus, one);
    ASSERT_TRUE(sharded.trainer->sharded());
    const int64_t params = sharded.model->parameter_count();
    bool clipped = false;
    for (int step = 0; step < 6; ++step) {
      const train::StepMetrics a = sharded.trainer->train_step(), b = whole.trainer->train_step(),
                               c = accum.trainer->train_step();
      for (const train::StepMetrics* o : {&b, &c}) {
        ASSERT_EQ(bits(a.loss), bits(o->loss)) << name << " step " << step;
        ASSERT_EQ(bits(a.grad_norm), bits(o->grad_norm)) << name << " step " << step;
        ASSERT_EQ(a.skipped, o->skipped) << name << " step " << step;
        ASSERT_EQ(a.loss_scale, o->loss_scale) << name << " step " << step;
      }
      clipped = clipped || (!a.skipped && a.grad_norm > k.clip);
      const uint64_t h = weights_hash(*sharded.model);
      ASSERT_EQ(h, weights_hash(*whole.model)) << name << " step " << step;
      ASSERT_EQ(h, weights_hash(*accum.model)) << name << " step " << step;
      for (uint64_t other : gathered(g, h)) ASSERT_EQ(other, h) << name << ": ranks differ at step " << step;
      // Sent: one fp32 chunk of the gradient (reduce-scatter) and, when the
      // step was applied, one of the weights; a chunk holds half the
      // parameters plus less than one optimizer chunk of padding.
      const int64_t chunk = a.comm_bytes / (a.skipped ? 4 : 8);
      EXPECT_EQ(a.comm_bytes % 4, 0);
      EXPECT_GE(chunk, (params + 1) / 2) << name;
      EXPECT_LT(chunk, (params + 1) / 2 + optim::kSpanElems + 16) << name;
    }
    if (k.init_scale > 0) {
      EXPECT_GT(sharded.trainer->amp().scaler().skipped_steps(), 0) << "no step was skipped";
    }
    EXPECT_TRUE(clipped) << name << ": clipping never acted (" << sharded.trainer->amp().scaler().skipped_steps()
                         << " steps skipped)";

    // Memory: Adam's two fp32 moments for every parameter, plus an fp32
    // master for every parameter the recipe rounds (fp16-master keeps its
    // norms in fp32 without a master). Summed over the ranks it is exactly
    // that count; each rank holds at most half, plus one optimizer chunk.
    const recipe::Recipe& r = s.recipe;
    const int64_t mastered = r.master_format == "fp32" && r.weight_format != "fp32"
                                 ? numel_where(*sharded.model, r.norms_fp32 ? +[](const autograd::Parameter& p) { return !autograd::is_norm(p.role); }
                                                                            : +[](const autograd::Parameter&) { return true; })
                                 : 0;
    const int64_t expected = params * 8 + mastered * 4;
    EXPECT_EQ(whole.trainer->state_bytes(), expected) << name;
    int64_t sum = 0;
    for (int64_t b : gathered(g, sharded.trainer->state_bytes())) {
      sum += b;
      EXPECT_LE(b, (params + 1) / 2 * 12 + optim::kSpanElems * 12) << name;
    }
    EXPECT_EQ(sum, expected) << name;
  }
}

TEST(ShardWorker, RefusesWhatCannotBeSharded) {
  if (!is_worker()) GTEST_SKIP() << "runs under mpirun (ShardLaunch)";
  dist::Group& g = worker_group();
  const data::TextCorpus corpus = data::TextCorpus::from_bytes(corpus_text(), "test");
  RunSetup s;
  s.group = &g;
  s.shard = true;
  for (const char* name : {"bf16-master-sr", "scalify-fp8-fp16state"}) {
    s.recipe = recipe::find_recipe(name);
    try {
      make_run(corpus, s);
      ADD_FAILURE() << name << " was sharded";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--shard-optimizer"), std::string::npos) << e.what();
    }
  }
}

// The checkpoint of rank 0 in `dir`, seen by every rank after the save.
std::string shared_dir(dist::Group& g, const std::string& base) {
  return g.from_root(base, "test directory");
}

TEST(ShardWorker, CheckpointsResumeAcrossRankCountsAndSharding) {
  if (!is_worker()) GTEST_SKIP() << "runs under mpirun (ShardLaunch)";
  dist::Group& g = worker_group();
  const data::TextCorpus corpus = data::TextCorpus::from_bytes(corpus_text(), "test");
  const std::string root = shared_dir(g, (fs::temp_directory_path() / ("mantissa_shard_" + std::to_string(::getpid()))).string());
  RunSetup s;
  s.recipe = recipe::find_recipe("bf16-amp");
  s.group = &g;
  s.shard = true;
  TrainRun first = make_run(corpus, s);
  for (int i = 0; i < 3; ++i) first.trainer->train_step();
  first.trainer->save(root + "/sharded");

  // Same ranks, sharded and unsharded: both continue as the uninterrupted run.
  TrainRun same = make_run(corpus, s);
  same.trainer->resume(root + "/sharded");
  s.shard = false;
  TrainRun unsharded = make_run(corpus, s);
  unsharded.trainer->resume(root + "/sharded");
  RunSetup cont = s;
  cont.shard = true;
  {
    // A copy of the uninterrupted run for each comparison.
    TrainRun again = make_run(corpus, cont);
    again.trainer->resume(root + "/sharded");
    expect_same_steps(same, first, 3, g, "sharded resume");
    expect_same_steps(unsharded, again, 3, g, "unsharded resume of a sharded checkpoint");
  }

  // One process resumes the 2-rank sharded checkpoint: the whole state,
  // which equals the unsharded trainer's (same checkpoint, no sharding).
  RunSetup solo = s;
  solo.group = nullptr;
  TrainRun one = make_run(corpus, solo);
  one.trainer->resume(root + "/sharded");
  TrainRun ref = make_run(corpus, s);
  ref.trainer->resume(root + "/sharded");
  const auto solo_state = one.opt->state_tensors();
  for (const auto& [name, t] : ref.opt->state_tensors()) {
    const auto it = solo_state.find(name);
    ASSERT_NE(it, solo_state.end()) << name;
    ASSERT_EQ(it->second.shape(), t.shape()) << name;
    ASSERT_EQ(std::memcmp(it->second.raw(), t.raw(), t.bytes()), 0) << name;
  }

  // One process writes (rank 0's copy is the one both ranks read); two
  // sharded ranks resume it and hold exactly their slices of its state.
  for (int i = 0; i < 2; ++i) one.trainer->train_step();
  if (g.rank() == 0) one.trainer->save(root + "/solo");
  g.barrier("test solo checkpoint");
  RunSetup two = s;
  two.shard = true;
  TrainRun resharded = make_run(corpus, two);
  resharded.trainer->resume(root + "/solo");
  EXPECT_EQ(resharded.trainer->step(), 5);
  const optim::OwnedRanges* owned = resharded.opt->owned();
  ASSERT_NE(owned, nullptr);
  const auto whole_state = one.opt->state_tensors();
  const auto mine = resharded.opt->state_tensors();
  const std::vector<autograd::Parameter*>& params = resharded.opt->parameters();
  int64_t held = 0;
  for (size_t i = 0; i < params.size(); ++i)
    for (const char* kind : {".exp_avg", ".exp_avg_sq"}) {
      const std::string name = params[i]->name + kind;
      const Tensor& w = whole_state.at(name);
      const Tensor& m = mine.at(name);
      ASSERT_EQ(m.numel(), (*owned)[i].size()) << name;
      held += m.numel();
      if (m.numel() > 0) {
        ASSERT_EQ(std::memcmp(m.raw(), w.f32() + (*owned)[i].begin, m.bytes()), 0) << name;
      }
    }
  int64_t total = 0;
  for (int64_t h : gathered(g, held)) total += h;
  EXPECT_EQ(total, 2 * resharded.model->parameter_count());
  EXPECT_EQ(weights_hash(*resharded.model), weights_hash(*one.model));
  g.barrier("test cleanup");
  if (g.rank() == 0) fs::remove_all(root);
}

TEST(ShardWorker, ErrorFeedbackResidualsResumeBitIdentically) {
  if (!is_worker()) GTEST_SKIP() << "runs under mpirun (ShardLaunch)";
  dist::Group& g = worker_group();
  const data::TextCorpus corpus = data::TextCorpus::from_bytes(corpus_text(), "test");
  const std::string root = shared_dir(g, (fs::temp_directory_path() / ("mantissa_ef_" + std::to_string(::getpid()))).string());
  for (bool shard : {false, true}) {
    RunSetup s;
    s.recipe = recipe::find_recipe("bf16-amp");
    s.group = &g;
    s.shard = shard;
    s.comm.format = "fp8";
    s.comm.error_feedback = true;
    const std::string dir = root + (shard ? "/sharded" : "/whole");
    TrainRun first = make_run(corpus, s);
    for (int i = 0; i < 3; ++i) first.trainer->train_step();
    first.trainer->save(dir);
    const std::vector<float> residual = first.trainer->reducer()->residual(),
                             owner = first.trainer->reducer()->owner_residual();
    bool nonzero = false;
    for (float v : residual) nonzero = nonzero || v != 0;
    ASSERT_TRUE(nonzero) << "fp8 dropped nothing: the test would not see lost residuals";
    TrainRun resumed = make_run(corpus, s);
    resumed.trainer->resume(dir);
    EXPECT_EQ(resumed.trainer->reducer()->residual(), residual);
    EXPECT_EQ(resumed.trainer->reducer()->owner_residual(), owner);
    expect_same_steps(resumed, first, 3, g, shard ? "sharded fp8 + feedback" : "fp8 + feedback");

    // Another layout (fp8 blocks of 64): the residuals are dropped with a
    // note, and the run goes on from zero residuals.
    RunSetup other = s;
    other.comm.block = 64;
    TrainRun dropped = make_run(corpus, other);
    dropped.trainer->resume(dir);
    for (float v : dropped.trainer->reducer()->residual()) ASSERT_EQ(v, 0.0f);
    EXPECT_TRUE(std::isfinite(dropped.trainer->train_step().loss));

    // Residuals too large for any step to stay finite (a crafted checkpoint's
    // 3e38, under valid CRCs) cost one skipped step: the skip forgets them
    // and the next steps update the model.
    TrainRun huge = make_run(corpus, s);
    huge.trainer->resume(dir);
    for (float& v : huge.trainer->reducer()->residual()) v = 3e38f;
    EXPECT_TRUE(huge.trainer->train_step().skipped);
    for (float v : huge.trainer->reducer()->residual()) ASSERT_TRUE(std::isfinite(v));
    for (int i = 0; i < 2; ++i) EXPECT_FALSE(huge.trainer->train_step().skipped) << "step " << i + 2 << " after";
  }
  g.barrier("test cleanup");
  if (g.rank() == 0) fs::remove_all(root);
}

TEST(ShardWorker, ExperimentRunsDataParallelAndOnlyRankZeroWrites) {
  if (!is_worker()) GTEST_SKIP() << "runs under mpirun (ShardLaunch)";
  dist::Group& g = worker_group();
  const fs::path root = fs::temp_directory_path() / ("mantissa_study_" + std::to_string(::getpid()));
  fs::create_directories(root);
  { std::ofstream(root / "corpus.txt") << corpus_text(); }
  study::ExperimentOptions o;
  o.recipes = {"bf16-amp"};
  o.mlp_recipes = {"none"};
  o.seeds = 1;
  o.layers = 1;
  o.d_model = 32;
  o.heads = 2;
  o.seq_len = 16;
  o.batch_size = 8;
  o.tokens = 8 * 16 * 6;
  o.data = (root / "corpus.txt").string();
  o.out = (root / "report").string();
  o.inspect = false;
  const study::ExperimentOutcome out = study::run_experiment(o, nullptr, false);
  ASSERT_EQ(out.results.size(), 1u);
  ASSERT_EQ(out.results[0].status, "ok") << out.results[0].error;
  const double bpc = out.results[0].val_bpc;
  for (double v : gathered(g, bpc)) EXPECT_EQ(bits(v), bits(bpc)) << "ranks disagree on the result";
  const fs::path run_dir = root / "report" / "runs" / out.results[0].id;
  if (g.rank() == 0) {
    EXPECT_TRUE(fs::exists(root / "report" / "report.md"));
    std::ifstream metrics(run_dir / "metrics.jsonl");
    std::string line, last_step;
    while (std::getline(metrics, line))
      if (line.find("\"ranks\":2") != std::string::npos) last_step = line;
    EXPECT_FALSE(last_step.empty()) << "no step line of a 2-rank run in " << run_dir;
  } else {
    EXPECT_FALSE(fs::exists(root / "report")) << "rank " << g.rank() << " wrote the report directory";
  }
  g.barrier("test cleanup");
  fs::remove_all(root);
}

TEST(ShardLaunch, TwoRankWorkersPass) {
  if (is_worker()) GTEST_SKIP();
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI or mpirun not installed (bash scripts/setup.sh)";
  EXPECT_EQ(launch_workers("ShardWorker.*"), 0);
}

}  // namespace
