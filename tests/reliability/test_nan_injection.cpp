// A NaN injected at step 3 of a short run, under every recipe family, into
// the activations (a weight poisoned for the forward/backward passes only),
// the gradients (after backward, before the update) or the weights (kept):
// dynamic loss scaling skips the step and recovers; otherwise the run stops
// as diverged. In every case the checkpoint on disk holds only finite values
// and, when the run diverged, is still the one saved before the fault.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "mantissa/train/checkpoint.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/train/finite.hpp"
#include "mantissa/train/run.hpp"
#include "mantissa/train/session.hpp"
#include "train/cli_util.hpp"

namespace {

namespace fs = std::filesystem;
using namespace mantissa;

enum class Where { activations, gradients, weights };
const char* name(Where w) {
  return w == Where::activations ? "activations" : w == Where::gradients ? "gradients" : "weights";
}

class NanInjection : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mantissa_nan_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string text = cli_test::word_corpus(6000, 5);
    std::ofstream(dir_ / "corpus.txt") << text;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<train::Session> session(const std::string& recipe) const {
    train::TrainConfig c;
    c.data = (dir_ / "corpus.txt").string();
    c.recipe = recipe;
    c.layers = 1, c.d_model = 16, c.heads = 2, c.seq_len = 16, c.batch_size = 2, c.threads = 1;
    c.warmup = 2, c.eval_batches = 2, c.eval_every = 0, c.steps = 8;
    return train::build_session(c);
  }

  // Every tensor of the checkpoint on disk is finite.
  static void expect_finite_on_disk(const fs::path& ck) {
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      const auto f = io::load_safetensors((ck / file).string());
      std::vector<std::pair<std::string, Tensor>> all(f.tensors.begin(), f.tensors.end());
      EXPECT_EQ(train::first_non_finite(all), "") << ck / file;
    }
  }

  fs::path dir_;
};

TEST_P(NanInjection, SkipsAndRecoversOrStopsAndNeverSavesNonFinite) {
  const std::string recipe = GetParam();
  const bool dynamic = session(recipe)->recipe.loss_scale.method == recipe::ScalingMethod::dynamic;
  for (Where where : {Where::activations, Where::gradients, Where::weights}) {
    SCOPED_TRACE(std::string(recipe) + ", NaN in the " + name(where));
    const fs::path ck = dir_ / ("ck-" + std::string(name(where)));
    auto s = session(recipe);
    train::RunOptions o;
    o.log = nullptr;
    o.save_dir = ck.string();
    o.steps = 2;
    ASSERT_FALSE(train::run(*s->trainer, o).diverged);
    const std::string good = io::read_file((ck / "model.safetensors").string());

    // Position 0's embedding: every window's forward pass reads it.
    autograd::Parameter* p = nullptr;
    for (autograd::Parameter* q : s->model->parameters())
      if (q->name == "transformer.wpe.weight") p = q;
    ASSERT_NE(p, nullptr);
    float kept = 0;
    s->trainer->set_fault_hook([&](int64_t step, bool after_backward) {
      if (step != 3) return;
      float& w = p->value.f32()[0];
      if (where == Where::weights && !after_backward) w = std::numeric_limits<float>::quiet_NaN();
      if (where == Where::activations && !after_backward) kept = w, w = std::numeric_limits<float>::quiet_NaN();
      if (where == Where::activations && after_backward) w = kept;  // only this step's passes saw it
      if (where == Where::gradients && after_backward) p->grad.f32()[0] = std::numeric_limits<float>::quiet_NaN();
      ++p->version;  // cached casts of the weight refresh
    });
    o.steps = 8;
    o.save_every = 1;
    o.diverge_after = 3;
    const train::RunSummary r = train::run(*s->trainer, o);
    expect_finite_on_disk(ck);
    std::printf("%-14s NaN in %-11s: %s, %ld of %ld steps skipped\n", recipe.c_str(), name(where),
                r.diverged ? ("diverged at step " + std::to_string(r.diverged_at)).c_str() : "recovered",
                static_cast<long>(r.skipped_this_run), static_cast<long>(r.steps_run));
    if (r.diverged) {
      EXPECT_FALSE(r.diverged_reason.empty());
      EXPECT_GE(r.diverged_at, 3);
      EXPECT_EQ(s->trainer->step(), r.diverged_at);
      // Nothing after the fault was saved over the good checkpoint.
      if (r.diverged_at == 3) {
        EXPECT_EQ(io::read_file((ck / "model.safetensors").string()), good);
      }
    } else {
      EXPECT_EQ(r.steps_done, 8);
      EXPECT_EQ(s->trainer->non_finite_state(), "");
    }
    if (dynamic && where != Where::weights) {
      // Loss scaling's job: the step is skipped, the scale backs off, training goes on.
      EXPECT_FALSE(r.diverged) << r.diverged_reason;
      EXPECT_GE(r.skipped_this_run, 1);
    }
    if (where == Where::weights && recipe == "fp32") {
      EXPECT_TRUE(r.diverged);  // nothing can undo a NaN weight
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RecipeFamilies, NanInjection,
                         ::testing::Values("fp32", "bf16-amp", "fp16-amp", "fp16-pure", "fp8-delayed", "mxfp8",
                                           "fp8-blockwise", "unit-fp8", "scalify-fp8"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
