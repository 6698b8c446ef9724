// FP4 recipes keep their saved Wgrad operands packed (4-bit codes two per
// byte plus one scale byte per block) and decode them in backward: the
// losses must be bit-identical to keeping the bf16 decode, the bytes kept per
// saved activation must be (n + 1) / 2 + blocks instead of 2 n (counted at the
// quantiser from each operand's shape), and the step's activation peak must
// fall by about that much (the counting allocator).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "mantissa/autograd/policy.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/tensor/memory.hpp"
#include "mantissa/train/session.hpp"
#include "train/cli_util.hpp"

namespace mantissa {
namespace {
namespace fs = std::filesystem;

// Forwards to the recipe's quantiser; sums what the backward pass keeps of
// each recorded activation, and what packed storage should cost for it.
class SavedBytes final : public autograd::OperandQuantiser {
 public:
  SavedBytes(std::shared_ptr<autograd::OperandQuantiser> inner, int64_t block) : inner_(std::move(inner)), b_(block) {}
  bool casts_forward() const override { return inner_->casts_forward(); }
  bool casts_backward() const override { return inner_->casts_backward(); }
  bool separate_wgrad() const override { return inner_->separate_wgrad(); }
  autograd::QuantisedOperand quantise(const Tensor& x, int64_t batch, int64_t rows, int64_t cols, int axis,
                                      const autograd::QuantSite& site, Tensor* decoded) override {
    autograd::QuantisedOperand q = inner_->quantise(x, batch, rows, cols, axis, site, decoded);
    if (site.role == autograd::OperandRole::activation && (q.backward.defined() || q.packed)) {
      kept += static_cast<int64_t>(q.bytes());
      const int64_t n = rows * cols;  // Wgrad blocks run along the other axis: b x 1 or 1 x b
      const int64_t tiles = axis == 2 ? (rows + b_ - 1) / b_ * cols : rows * ((cols + b_ - 1) / b_);
      expected_packed += (n + 1) / 2 + tiles;
      expected_bf16 += 2 * n;
    }
    return q;
  }
  Weight quantise_weight(const autograd::Parameter& p, int axis, const autograd::QuantSite& site) override {
    return inner_->quantise_weight(p, axis, site);
  }
  Tensor decode(const autograd::QuantisedOperand& q) const override { return inner_->decode(q); }
  void end_step() override { inner_->end_step(); }
  void set_progress(int64_t u, int64_t t) override { inner_->set_progress(u, t); }
  int64_t kept = 0, expected_packed = 0, expected_bf16 = 0;

 private:
  std::shared_ptr<autograd::OperandQuantiser> inner_;
  int64_t b_;
};

class Fp4Saved : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mantissa_fp4_saved_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const std::string text = cli_test::word_corpus(20000, 3);
    std::ofstream(dir_ / "corpus.txt") << text;
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct Run {
    std::vector<double> losses;
    int64_t kept = 0, expected_packed = 0, expected_bf16 = 0;
    size_t activation_peak = 0;
  };
  Run run_recipe(const std::string& recipe, bool packed) const {
    train::TrainConfig c;
    c.model = "gpt";
    c.data = (dir_ / "corpus.txt").string();
    c.layers = 3;
    c.d_model = 64;
    c.heads = 4;
    c.seq_len = 32;
    c.batch_size = 4;
    c.steps = 4;
    c.warmup = 1;
    c.eval_batches = 1;
    c.threads = 1;
    c.recipe = recipe;
    c.set = {"bf16_layers=none", std::string("fp4_pack_saved=") + (packed ? "true" : "false")};
    auto s = train::build_session(c);
    autograd::PrecisionPolicy p = s->model->precision();
    auto counter = std::make_shared<SavedBytes>(p.quantiser, recipe.rfind("nvfp4", 0) == 0 ? 16 : 32);
    p.quantiser = counter;
    s->model->set_precision(p);
    Run r;
    for (int i = 0; i < 4; ++i) {
      const MemoryStats before = memory_stats();
      reset_peak_memory();
      r.losses.push_back(s->trainer->train_step().loss);
      const MemoryStats after = memory_stats();
      r.activation_peak = std::max(r.activation_peak, after.peak_of(MemoryKind::activation) - before.of(MemoryKind::activation));
    }
    r.losses.push_back(s->trainer->evaluate().val_loss);
    r.kept = counter->kept;
    r.expected_packed = counter->expected_packed;
    r.expected_bf16 = counter->expected_bf16;
    return r;
  }
  fs::path dir_;
};

TEST_F(Fp4Saved, PackedActivationsTrainIdenticallyInAQuarterOfTheBytes) {
  for (const char* recipe : {"nvfp4", "mxfp4", "mxfp4-fwd"}) {
    SCOPED_TRACE(recipe);
    const Run plain = run_recipe(recipe, false), packed = run_recipe(recipe, true);
    ASSERT_EQ(plain.losses.size(), packed.losses.size());
    for (size_t i = 0; i < plain.losses.size(); ++i) EXPECT_EQ(plain.losses[i], packed.losses[i]) << i;
    ASSERT_GT(packed.expected_packed, 0);
    EXPECT_EQ(plain.kept, plain.expected_bf16);
    EXPECT_EQ(packed.kept, packed.expected_packed);
    // The peak sits where the forward pass has saved everything: it falls by
    // the saving of one step's saved operands (the counters sum 4 steps).
    const double saving = static_cast<double>(plain.kept - packed.kept) / 4;
    const double fell = static_cast<double>(plain.activation_peak) - static_cast<double>(packed.activation_peak);
    std::printf("%-10s saved operands %lld -> %lld bytes a step, activation peak %zu -> %zu\n", recipe,
                static_cast<long long>(plain.kept / 4), static_cast<long long>(packed.kept / 4), plain.activation_peak,
                packed.activation_peak);
    EXPECT_GT(fell, 0.9 * saving);
    EXPECT_LT(fell, 1.1 * saving);
  }
}

}  // namespace
}  // namespace mantissa
