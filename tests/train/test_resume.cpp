// Resume gives bit-identical losses and weights to an uninterrupted run:
// model, optimizer, fp32 masters with stochastic rounding, dynamic loss
// scaler and data position all come back from the checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "mantissa/data/text.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/train/trainer.hpp"
#include "toy_model.hpp"

using namespace mantissa;

namespace {

std::string corpus_text() {
  std::mt19937_64 rng(17);
  const char* words[] = {"the ", "of ", "and ", "Elizabeth ", "Darcy ", "said ", "was ", "a ", "to ", "her ", ". "};
  std::string s;
  while (s.size() < 20000) s += words[rng() % std::size(words)];
  return s;
}

recipe::Recipe resume_recipe() {
  // bf16 working weights, fp32 masters rounded stochastically, and a dynamic
  // scale that grows every 2 steps: every piece of state matters.
  recipe::Recipe r = recipe::find_recipe("bf16-master-sr");
  r.name = "test-resume";
  r.loss_scale.method = recipe::ScalingMethod::dynamic;
  r.loss_scale.init_scale = 1024;
  r.loss_scale.growth_interval = 2;
  return r;
}

struct RunState {
  explicit RunState(const data::TextCorpus& corpus, uint64_t init_seed)
      : model(256, init_seed), source(corpus, 4, 16, 99) {
    optim::OptimizerConfig oc;
    oc.weight_decay = 0.1;
    opt = optim::make_optimizer(oc, model.parameters());
    train::TrainerOptions to;
    to.schedule.max_lr = 3e-2;
    to.schedule.min_lr = 3e-3;
    to.schedule.warmup_steps = 3;
    to.schedule.decay_steps = 12;
    to.amp.seed = 7;
    to.amp.grad_clip = 1.0;
    trainer = std::make_unique<train::Trainer>(model, *opt, source, nullptr, resume_recipe(), to);
  }
  toy::Bigram model;
  data::TextWindows source;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<train::Trainer> trainer;
};

std::vector<float> weights(nn::Model& m) {
  std::vector<float> w;
  for (auto* p : m.parameters()) {
    auto v = p->value.to_vector();
    w.insert(w.end(), v.begin(), v.end());
  }
  return w;
}

}  // namespace

TEST(Resume, BitIdenticalToAnUninterruptedRun) {
  const auto corpus = data::TextCorpus::from_bytes(corpus_text(), "generated");
  const std::string dir = (std::filesystem::temp_directory_path() / ("mantissa_resume_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);

  std::vector<double> straight;
  RunState a(corpus, 1);
  for (int s = 0; s < 12; ++s) straight.push_back(a.trainer->train_step().loss);

  std::vector<double> resumed;
  {
    RunState b(corpus, 1);
    for (int s = 0; s < 6; ++s) resumed.push_back(b.trainer->train_step().loss);
    b.trainer->save(dir);
  }
  RunState c(corpus, 12345);  // another init: everything must come from the checkpoint
  c.trainer->resume(dir);
  EXPECT_EQ(c.trainer->step(), 6);
  for (int s = 0; s < 6; ++s) resumed.push_back(c.trainer->train_step().loss);

  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_EQ(straight[i], resumed[i]) << "step " << i + 1;
  EXPECT_EQ(weights(a.model), weights(c.model));
  EXPECT_EQ(a.trainer->amp().scaler().scale(), c.trainer->amp().scaler().scale());
  EXPECT_GT(a.trainer->amp().scaler().scale(), 1024.0);  // the scale grew: its state was restored
  EXPECT_EQ(a.trainer->amp().master_weights().masters().size(), 2u);
  EXPECT_LT(straight.back(), straight.front());  // it learned

  // A run that did not save the same recipe is refused with a clear message.
  toy::Bigram other(256, 1);
  data::TextWindows src(corpus, 4, 16, 99);
  optim::OptimizerConfig oc;
  auto opt = optim::make_optimizer(oc, other.parameters());
  train::Trainer wrong(other, *opt, src, nullptr, recipe::find_recipe("bf16-master-sr"), {});
  try {
    wrong.resume(dir);
    FAIL() << "resumed with another recipe";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("recipe"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}
