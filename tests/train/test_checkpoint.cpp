// Saved models and resumable checkpoints: bit-exact round trips, the Hugging
// Face layout rules (tied head not stored), refusal of corrupt or truncated
// files, recovery from saves interrupted at each point, and a process killed
// (SIGKILL) at random moments during saves.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "mantissa/train/checkpoint.hpp"
#include "mantissa/io/files.hpp"

using mantissa::DType;
using mantissa::MemoryKind;
using mantissa::Tensor;
namespace fs = std::filesystem;
namespace io = mantissa::io;
namespace nn = mantissa::nn;
namespace optim = mantissa::optim;

namespace {

// A model with GPT-2-named parameters and a tied head; enough for I/O.
class TinyModel : public nn::Model {
 public:
  explicit TinyModel(int64_t width = 4, float base = 0.0f) {
    add("transformer.wte.weight", {6, width}, true, base);
    add("transformer.h.0.ln_1.bias", {width}, false, base);
    add("transformer.h.0.attn.c_attn.weight", {width, 3 * width}, true, base);
    // Tied head: same storage as wte, so it is not stored.
    mantissa::autograd::Parameter head = params_[0];
    head.name = "lm_head.weight";
    params_.push_back(head);
    width_ = width;
  }
  std::vector<mantissa::autograd::Parameter*> parameters() override {
    std::vector<mantissa::autograd::Parameter*> out;
    for (auto& p : params_) out.push_back(&p);
    return out;
  }
  nn::LossSum forward_backward(const nn::Batch&, float) override { return {}; }
  nn::LossSum evaluate(const nn::Batch&) override { return {}; }
  std::string config_json() const override {
    return nlohmann::json{{"model_type", "gpt2"}, {"vocab_size", 6}, {"n_positions", 8}, {"n_embd", width_},
                          {"n_layer", 1}, {"n_head", 1}}
        .dump();
  }
  std::string kind() const override { return "gpt"; }
  void fill(float v) {
    for (size_t j = 0; j + 1 < params_.size(); ++j)
      for (int64_t i = 0; i < params_[j].value.numel(); ++i)
        params_[j].value.f32()[i] = v + 0.001f * static_cast<float>(i) + static_cast<float>(j);
  }
  std::vector<mantissa::autograd::Parameter> params_;

 private:
  void add(const std::string& name, const mantissa::Shape& shape, bool decay, float base) {
    mantissa::autograd::Parameter p;
    p.name = name;
    p.value = Tensor::empty(shape, DType::f32, MemoryKind::parameter);
    p.grad = Tensor::zeros(shape, DType::f32, MemoryKind::gradient);
    p.decay = decay;
    for (int64_t i = 0; i < p.value.numel(); ++i)
      p.value.f32()[i] = base + static_cast<float>(std::sin(1.0 + static_cast<double>(i + 7 * params_.size())));
    params_.push_back(p);
  }
  int64_t width_ = 4;
};

std::string temp_dir() {
  char tmpl[] = "/tmp/mantissa_ckpt_XXXXXX";
  const char* d = mkdtemp(tmpl);
  if (!d) throw std::runtime_error("mkdtemp failed");
  return d;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

void step_optimizer(TinyModel& m, optim::Optimizer& opt, int steps) {
  for (int k = 0; k < steps; ++k) {
    for (auto* p : m.parameters())
      for (int64_t i = 0; i < p->grad.numel(); ++i) p->grad.f32()[i] = std::cos(0.3f * static_cast<float>(i + k));
    opt.step(1e-2);
  }
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<std::string> leftovers(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (n.find(".tmp-") != std::string::npos || n.find(".old-") != std::string::npos) out.push_back(n);
  }
  return out;
}

}  // namespace

TEST(SaveModel, HuggingFaceLayoutAndBitExactReload) {
  const std::string dir = temp_dir() + "/model";
  TinyModel a;
  mantissa::train::save_model(dir, a);
  auto file = io::load_safetensors(dir + "/model.safetensors");
  EXPECT_EQ(file.metadata.at("format"), "pt");
  ASSERT_EQ(file.tensors.size(), 3u);  // lm_head is tied, not stored
  EXPECT_EQ(file.tensors.count("lm_head.weight"), 0u);
  EXPECT_EQ(file.tensors.at("transformer.h.0.attn.c_attn.weight").shape(), (mantissa::Shape{4, 12}));
  auto cfg = nlohmann::json::parse(mantissa::train::read_model_config(dir));
  EXPECT_EQ(cfg["model_type"], "gpt2");
  EXPECT_EQ(cfg["n_embd"], 4);

  TinyModel b(4, 5.0f);
  mantissa::train::load_model_weights(dir, b);
  for (size_t j = 0; j < a.params_.size(); ++j) {
    EXPECT_TRUE(same_bits(a.params_[j].value, b.params_[j].value)) << a.params_[j].name;
    EXPECT_EQ(b.params_[j].version, 1) << "version must be bumped so cached casts refresh";
  }
  EXPECT_TRUE(b.params_.back().value.same_storage(b.params_[0].value));  // still tied
  // Saving the reloaded model reproduces the file byte for byte.
  const std::string dir2 = dir + "2";
  mantissa::train::save_model(dir2, b);
  EXPECT_EQ(io::read_file(dir + "/model.safetensors"), io::read_file(dir2 + "/model.safetensors"));
  fs::remove_all(fs::path(dir).parent_path());
}

TEST(SaveModel, WrongShapesAndMissingFilesAreRefused) {
  const std::string root = temp_dir();
  TinyModel a(4);
  mantissa::train::save_model(root + "/m", a);
  TinyModel wide(8);
  std::string msg = error_of([&] { mantissa::train::load_model_weights(root + "/m", wide); });
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("transformer.wte.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[6, 4] but [6, 8] expected"), std::string::npos) << msg;
  msg = error_of([&] { mantissa::train::load_model_weights(root + "/absent", wide); });
  EXPECT_NE(msg.find(root + "/absent/model.safetensors"), std::string::npos) << msg;
  msg = error_of([&] { mantissa::train::read_model_config(root + "/absent"); });
  EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
  fs::remove_all(root);
}

TEST(Checkpoint, RoundTripIsBitExact) {
  const std::string root = temp_dir();
  const std::string dir = root + "/ckpt";
  TinyModel a;
  optim::OptimizerConfig cfg;
  cfg.weight_decay = 0.1;
  auto opt_a = optim::make_optimizer(cfg, a.parameters());
  step_optimizer(a, *opt_a, 3);
  Tensor working = a.params_[0].value.to(DType::bf16);
  working.set_scale(0.25f);
  const std::string trainer = R"({"step":3,"rng":"12 34","loss_scale":65536})";
  mantissa::train::save_checkpoint(dir, a, opt_a.get(), trainer, {{"working.wte", working}});
  EXPECT_TRUE(mantissa::train::checkpoint_exists(dir));
  EXPECT_TRUE(leftovers(root).empty());

  TinyModel b(4, 3.0f);
  auto opt_b = optim::make_optimizer(cfg, b.parameters());
  mantissa::train::CheckpointData d = mantissa::train::load_checkpoint(dir, b, opt_b.get());
  EXPECT_EQ(d.trainer_state, trainer);
  ASSERT_EQ(d.extra_tensors.count("working.wte"), 1u);
  EXPECT_TRUE(same_bits(d.extra_tensors.at("working.wte"), working));
  EXPECT_EQ(d.extra_tensors.at("working.wte").scale(), 0.25f);
  for (size_t j = 0; j < a.params_.size(); ++j) EXPECT_TRUE(same_bits(a.params_[j].value, b.params_[j].value));
  EXPECT_EQ(opt_b->step_count(), 3);
  auto sa = opt_a->state_tensors(), sb = opt_b->state_tensors();
  ASSERT_EQ(sa.size(), sb.size());
  for (const auto& [name, t] : sa) EXPECT_TRUE(same_bits(t, sb.at(name))) << name;
  // Both continue identically.
  step_optimizer(a, *opt_a, 2);
  step_optimizer(b, *opt_b, 2);
  for (size_t j = 0; j < a.params_.size(); ++j) EXPECT_TRUE(same_bits(a.params_[j].value, b.params_[j].value));
  // A checkpoint is also a model directory.
  TinyModel c(4, 9.0f);
  mantissa::train::load_model_weights(dir, c);
  EXPECT_TRUE(same_bits(c.params_[2].value, b.params_[2].value) == false);  // b moved on since
  // Overwriting replaces atomically and leaves no siblings behind.
  mantissa::train::save_checkpoint(dir, a, opt_a.get(), R"({"step":5})");
  EXPECT_TRUE(leftovers(root).empty());
  TinyModel e;
  auto opt_e = optim::make_optimizer(cfg, e.parameters());
  EXPECT_EQ(mantissa::train::load_checkpoint(dir, e, opt_e.get()).trainer_state, R"({"step":5})");
  EXPECT_EQ(opt_e->step_count(), 5);
  // The wrong optimizer type is refused, naming the file.
  optim::OptimizerConfig sgd;
  sgd.type = "sgd";
  auto opt_s = optim::make_optimizer(sgd, e.parameters());
  std::string msg = error_of([&] { mantissa::train::load_checkpoint(dir, e, opt_s.get()); });
  EXPECT_NE(msg.find("optimizer.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("adamw"), std::string::npos) << msg;
  fs::remove_all(root);
}

TEST(Checkpoint, CorruptOrTruncatedFilesAreRefused) {
  const std::string root = temp_dir();
  const std::string dir = root + "/ckpt";
  TinyModel a;
  auto opt = optim::make_optimizer({}, a.parameters());
  auto fresh_load = [&] {
    TinyModel b;
    auto o = optim::make_optimizer({}, b.parameters());
    return error_of([&] { mantissa::train::load_checkpoint(dir, b, o.get()); });
  };

  mantissa::train::save_checkpoint(dir, a, opt.get(), "{}");
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") - 3);
  std::string msg = fresh_load();
  EXPECT_NE(msg.find(dir + "/model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  mantissa::train::save_checkpoint(dir, a, opt.get(), "{}");
  {
    std::fstream f(dir + "/optimizer.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x55');
  }
  msg = fresh_load();
  EXPECT_NE(msg.find("optimizer.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CRC-32"), std::string::npos) << msg;

  mantissa::train::save_checkpoint(dir, a, opt.get(), "{}");
  fs::remove(dir + "/trainer_state.json");
  msg = fresh_load();
  EXPECT_NE(msg.find("trainer_state.json"), std::string::npos) << msg;

  mantissa::train::save_checkpoint(dir, a, opt.get(), "{}");
  fs::remove(dir + "/COMPLETE");
  msg = fresh_load();
  EXPECT_NE(msg.find("not a complete checkpoint"), std::string::npos) << msg;
  EXPECT_FALSE(mantissa::train::checkpoint_exists(dir));

  msg = fresh_load();
  fs::remove_all(dir);
  msg = fresh_load();
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  fs::remove_all(root);
}

// The states a save can be killed in, reproduced by hand.
TEST(Checkpoint, InterruptedSavesLeaveTheLastCheckpointLoadable) {
  const std::string root = temp_dir();
  const std::string dir = root + "/ckpt";
  TinyModel a;
  auto opt = optim::make_optimizer({}, a.parameters());
  mantissa::train::save_checkpoint(dir, a, opt.get(), R"({"step":1})");
  auto load_state = [&](const std::string& d) {
    TinyModel b;
    auto o = optim::make_optimizer({}, b.parameters());
    return mantissa::train::load_checkpoint(d, b, o.get()).trainer_state;
  };

  // Killed while writing the new directory: a half-written sibling, marked
  // as a save in progress.
  fs::create_directories(dir + ".tmp-99999-0");
  { std::ofstream(dir + ".tmp-99999-0/.mantissa-partial"); }
  { std::ofstream(dir + ".tmp-99999-0/model.safetensors") << "partial"; }
  EXPECT_EQ(load_state(dir), R"({"step":1})");
  mantissa::train::save_checkpoint(dir, a, opt.get(), R"({"step":2})");  // cleans it up
  EXPECT_TRUE(leftovers(root).empty());
  EXPECT_EQ(load_state(dir), R"({"step":2})");

  // Killed between the two renames of the non-exchange path: DIR is gone,
  // DIR.old-* holds the previous complete checkpoint.
  fs::rename(dir, dir + ".old-99999-3");
  EXPECT_TRUE(mantissa::train::checkpoint_exists(dir));
  EXPECT_EQ(load_state(dir), R"({"step":2})");
  EXPECT_NE(mantissa::train::read_model_config(dir).find("gpt2"), std::string::npos);
  mantissa::train::save_checkpoint(dir, a, opt.get(), R"({"step":3})");
  EXPECT_TRUE(leftovers(root).empty());
  EXPECT_EQ(load_state(dir), R"({"step":3})");
  fs::remove_all(root);
}

// Real kills: a child process saves checkpoints in a loop (each one's
// weights derived from its step number) and is SIGKILLed after a random
// delay; the directory must always load, consistently.
TEST(Checkpoint, SigkillDuringSavesNeverBreaksTheCheckpoint) {
  const std::string root = temp_dir();
  const std::string dir = root + "/ckpt";
  TinyModel a(64);
  a.fill(0.0f);
  // Kill times spread over a few saves' durations (fsync makes a save take
  // milliseconds to a few hundred, depending on the disk).
  const auto t0 = std::chrono::steady_clock::now();
  mantissa::train::save_checkpoint(dir, a, nullptr, "0");
  const auto save_us = std::max<int64_t>(
      200, std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
  std::mt19937 rng(11);
  int max_seen = 0;
  for (int round = 0; round < 10; ++round) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int step = 1;; ++step) {
        a.fill(static_cast<float>(step));
        mantissa::train::save_checkpoint(dir, a, nullptr, std::to_string(step));
      }
    }
    // Killed however this round ends, a failed assertion included: a child
    // left running would save forever and hold ctest's output pipe open.
    struct Reaper {
      pid_t pid;
      ~Reaper() {
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
      }
    } reaper{pid};
    std::this_thread::sleep_for(std::chrono::microseconds(save_us / 2 + static_cast<int64_t>(rng() % static_cast<uint32_t>(3 * save_us))));
    if (round == 9) {  // on a loaded machine the child may not have finished a save yet: wait for one
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      TinyModel probe(64);
      while (std::chrono::steady_clock::now() < deadline && mantissa::train::load_checkpoint(dir, probe, nullptr).trainer_state == "0")
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    TinyModel b(64, 7.0f);
    mantissa::train::CheckpointData d;
    ASSERT_NO_THROW(d = mantissa::train::load_checkpoint(dir, b, nullptr)) << "round " << round;
    const int step = std::stoi(d.trainer_state);
    max_seen = std::max(max_seen, step);
    TinyModel want(64);
    want.fill(static_cast<float>(step));
    for (size_t j = 0; j < want.params_.size(); ++j)
      EXPECT_TRUE(same_bits(want.params_[j].value, b.params_[j].value)) << "round " << round << " step " << step;
  }
  EXPECT_GT(max_seen, 0);  // the child did get saves through
  fs::remove_all(root);
}
