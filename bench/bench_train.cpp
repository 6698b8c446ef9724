// Training-step speed of mantissa's GPT, the counterpart of bench/torch_gpt.py (run both with
// bench/run_train_vs_torch.sh). Not a Google Benchmark suite: one training step takes tens of
// milliseconds and the harness wants the same statistic as the PyTorch side, so it times
// warm-up + N steps of the real Trainer::train_step (forward, backward, the recipe's mixed
// precision, AdamW) on random byte tokens and reports the median.
//
//   bench_train [--threads 2] [--recipe fp32,bf16-amp] [--layers 4] [--d-model 256]
//               [--heads 4] [--seq-len 128] [--batch 16] [--steps 10] [--warmup 3]
//
// Prints one JSON object: per recipe tokens_per_s and step_ms, plus a breakdown of the fp32
// step into zero_grad / forward / backward / optimizer measured with the model driven directly.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/amp/amp.hpp"
#include "mantissa/amp/recipe.hpp"
#include "mantissa/data/source.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/gpt.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/train/trainer.hpp"

namespace {

using namespace mantissa;
using Clock = std::chrono::steady_clock;

struct Options {
  int threads = 2;
  std::vector<std::string> recipes = {"fp32"};
  int64_t layers = 4, d_model = 256, heads = 4, seq_len = 128, batch = 16, vocab = 256;
  int steps = 10, warmup = 3;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "bench_train: %s\n", message.c_str());
  std::exit(2);
}

int64_t positive(const std::string& flag, const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    usage_error(flag + " expects a positive integer, got '" + text + "'");
  }
  if (used != text.size() || v <= 0)
    usage_error(flag + " expects a positive integer, got '" + text + "'");
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "bench_train [--threads N] [--recipe a,b] [--layers L] [--d-model C] [--heads H]\n"
          "            [--seq-len T] [--batch B] [--vocab V] [--steps N] [--warmup N]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) usage_error("missing value after " + flag);
    std::string value = argv[++i];
    if (flag == "--threads")
      o.threads = static_cast<int>(positive(flag, value));
    else if (flag == "--layers")
      o.layers = positive(flag, value);
    else if (flag == "--d-model")
      o.d_model = positive(flag, value);
    else if (flag == "--heads")
      o.heads = positive(flag, value);
    else if (flag == "--seq-len")
      o.seq_len = positive(flag, value);
    else if (flag == "--batch")
      o.batch = positive(flag, value);
    else if (flag == "--vocab")
      o.vocab = positive(flag, value);
    else if (flag == "--steps")
      o.steps = static_cast<int>(positive(flag, value));
    else if (flag == "--warmup")
      o.warmup = static_cast<int>(positive(flag, value));
    else if (flag == "--recipe") {
      o.recipes.clear();
      std::stringstream ss(value);
      for (std::string r; std::getline(ss, r, ',');)
        if (!r.empty()) o.recipes.push_back(r);
      if (o.recipes.empty()) usage_error("--recipe expects a comma-separated list of recipe names");
    } else {
      usage_error("unknown flag " + flag + " (see --help)");
    }
  }
  if (o.d_model % o.heads != 0)
    usage_error("--d-model " + std::to_string(o.d_model) + " is not divisible by --heads " +
                std::to_string(o.heads));
  return o;
}

// Random byte windows: inputs and next-token targets, like data::TextWindows draws from a corpus.
class RandomTokens final : public data::TrainSource {
 public:
  RandomTokens(int64_t batch, int64_t seq_len, int64_t vocab) : b_(batch), t_(seq_len), v_(vocab) {}
  nn::Batch next() override {
    nn::Batch out{Tensor::empty({b_, t_}, DType::i32), Tensor::empty({b_, t_}, DType::i32)};
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(v_ - 1));
    for (int64_t i = 0; i < b_; ++i) {
      int32_t prev = dist(rng_);
      for (int64_t j = 0; j < t_; ++j) {
        int32_t cur = dist(rng_);
        out.inputs.data<int32_t>()[i * t_ + j] = prev;
        out.targets.data<int32_t>()[i * t_ + j] = cur;
        prev = cur;
      }
    }
    return out;
  }
  std::string state_json() const override { return "{}"; }
  void load_state(const std::string&) override {}

 private:
  int64_t b_, t_, v_;
  std::mt19937 rng_{1};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_of(const std::function<void()>& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

nn::GPTConfig gpt_config(const Options& o) {
  nn::GPTConfig c;
  c.vocab = o.vocab;
  c.context = o.seq_len;
  c.layers = o.layers;
  c.d_model = o.d_model;
  c.heads = o.heads;
  c.seed = 0;
  c.validate();
  return c;
}

optim::OptimizerConfig adamw_config() {  // the settings bench/torch_gpt.py uses
  optim::OptimizerConfig c;
  c.type = "adamw";
  c.beta1 = 0.9;
  c.beta2 = 0.999;
  c.eps = 1e-8;
  c.weight_decay = 0.01;
  return c;
}

// The whole training step as `mantissa train` runs it, under one recipe.
nlohmann::ordered_json time_recipe(const Options& o, const std::string& recipe_name) {
  amp::Recipe recipe = amp::find_recipe(recipe_name);
  nn::GPT model(gpt_config(o));
  model.set_precision(amp::precision_policy(recipe));  // as train::apply_precision does
  auto optimizer = optim::make_optimizer(adamw_config(), model.parameters());
  RandomTokens source(o.batch, o.seq_len, o.vocab);
  train::TrainerOptions options;
  options.schedule.max_lr = options.schedule.min_lr = 1e-3;  // constant, as in torch_gpt.py
  train::Trainer trainer(model, *optimizer, source, nullptr, recipe, options);
  std::vector<double> times;
  double first_loss = 0;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    train::StepMetrics m;
    double s = seconds_of([&] { m = trainer.train_step(); });
    if (!std::isfinite(m.loss))
      throw std::runtime_error(recipe_name + ": non-finite loss at step " + std::to_string(step));
    if (step == 0) first_loss = m.loss;
    if (step >= o.warmup) times.push_back(s);
  }
  double med = median(times);
  return {{"tokens_per_s", static_cast<double>(o.batch * o.seq_len) / med},
          {"step_ms", med * 1e3},
          {"first_loss", first_loss}};
}

// fp32 step split into its phases by driving model and optimizer directly (medians in ms).
// backward = forward_backward - forward-only evaluate.
nlohmann::ordered_json fp32_breakdown(const Options& o) {
  nn::GPT model(gpt_config(o));
  auto optimizer = optim::make_optimizer(adamw_config(), model.parameters());
  RandomTokens source(o.batch, o.seq_len, o.vocab);
  const float grad_scale = 1.0f / static_cast<float>(o.batch * o.seq_len);
  std::vector<double> zero, fwd, fwd_bwd, opt;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    nn::Batch batch = source.next();
    double z = seconds_of([&] { model.zero_grad(); });
    double f = seconds_of([&] { model.evaluate(batch); });
    double fb = seconds_of([&] { model.forward_backward(batch, grad_scale); });
    double p = seconds_of([&] { optimizer->step(1e-3); });
    if (step < o.warmup) continue;
    zero.push_back(z), fwd.push_back(f), fwd_bwd.push_back(fb), opt.push_back(p);
  }
  double f = median(fwd), fb = median(fwd_bwd);
  return {{"zero_grad_ms", median(zero) * 1e3},
          {"forward_ms", f * 1e3},
          {"backward_ms", (fb - f) * 1e3},
          {"forward_backward_ms", fb * 1e3},
          {"optimizer_ms", median(opt) * 1e3}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  try {
    kernels::set_num_threads(o.threads);
    nlohmann::ordered_json out = {{"threads", kernels::num_threads()},
                                  {"layers", o.layers},
                                  {"d_model", o.d_model},
                                  {"heads", o.heads},
                                  {"seq_len", o.seq_len},
                                  {"batch", o.batch},
                                  {"vocab", o.vocab},
                                  {"steps", o.steps},
                                  {"warmup", o.warmup}};
    for (const std::string& r : o.recipes) {
      nlohmann::ordered_json m = time_recipe(o, r);
      std::fprintf(stderr, "mantissa %-10s %9.1f tokens/s  %8.2f ms/step\n", r.c_str(),
                   m["tokens_per_s"].get<double>(), m["step_ms"].get<double>());
      out["recipes"][r] = m;
    }
    out["fp32_breakdown"] = fp32_breakdown(o);
    std::printf("%s\n", out.dump().c_str());
  } catch (const std::invalid_argument& e) {
    usage_error(e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
