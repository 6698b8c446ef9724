// Training-step speed of mantissa's GPT, the counterpart of bench/torch_gpt.py (run both with
// bench/run_train_vs_torch.sh). Not a Google Benchmark suite: one training step takes tens of
// milliseconds and the harness wants the same statistic as the PyTorch side, so it times
// warm-up + N steps of the real Trainer::train_step (forward, backward, the recipe's mixed
// precision, AdamW) on random byte tokens and reports the median.
//
//   bench_train [--threads 2] [--recipe fp32,bf16-amp,fp8-delayed:saved_format=bf16] [--layers 4] [--d-model 256]
//               [--heads 4] [--seq-len 128] [--batch 16] [--steps 10] [--warmup 3]
//               [--memory-trace]
//
// Prints one JSON object: the measured matmul peak (1024^3, f32 and bf16) and the register-level
// fp32 FMA and vdpbf16ps peaks (the step's fraction of the FMA peak is the physical limit), the
// route bf16 products take on this CPU (kernels/matmul_route.hpp), per recipe
// tokens_per_s, step_ms, "memory" (peaks of the timed steps: activations and workspace the step
// adds, the process total, parameters + gradients + optimizer state; also on the stderr line) and
// a breakdown of --profile-steps further steps by kernel category
// (matmul, attention, norms, elementwise, embedding, conversion; cpu::profile), optimizer and
// framework overhead, with the achieved fraction of the peak; recipes this build lacks (or cannot
// run yet) are listed under "skipped" with the reason. --memory-trace runs one more step per
// recipe with the allocation trace on and itemises the live activations at its peak by op,
// dtype and shape (stderr table, "memory_trace" in the JSON).
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

#include "bench_args.hpp"
#include "peak_probe.hpp"
#include "memory_trace_table.hpp"
#include "mantissa/amp/amp.hpp"
#include "mantissa/recipe/recipe.hpp"
#include "mantissa/data/source.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/kernels/matmul.hpp"
#include "mantissa/kernels/matmul_route.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/cpu/profile.hpp"
#include "mantissa/nn/gpt.hpp"
#include "mantissa/nn/llama.hpp"
#include "mantissa/quant/fp8.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/tensor/memory.hpp"
#include "mantissa/train/session.hpp"
#include "mantissa/train/trainer.hpp"

namespace {

using namespace mantissa;
using Clock = std::chrono::steady_clock;

struct Options {
  int threads = 2;
  std::vector<std::string> recipes = {"fp32"};
  std::string model = "gpt";  // gpt or llama (default hidden width, no grouping)
  int64_t layers = 4, d_model = 256, heads = 4, seq_len = 128, batch = 16, vocab = 256;
  int steps = 10, warmup = 3;
  int profile_steps = 3;  // extra steps per recipe run with the kernel profiler on (0: none)
  bool memory_trace = false;  // one more step per recipe, its activation peak itemised
};

using bench_args::positive;
using bench_args::usage_error;

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "bench_train [--model gpt|llama] [--threads N] [--recipe a,b] [--layers L] [--d-model C] [--heads H]\n"
          "            [--seq-len T] [--batch B] [--vocab V] [--steps N] [--warmup N]\n"
          "            [--profile-steps N] [--memory-trace]\n");
      std::exit(0);
    }
    if (flag == "--memory-trace") {
      o.memory_trace = true;
      continue;
    }
    if (i + 1 >= argc) usage_error("missing value after " + flag);
    std::string value = argv[++i];
    if (flag == "--model") {
      if (value != "gpt" && value != "llama") usage_error("--model must be gpt or llama, got '" + value + "'");
      o.model = value;
    } else if (flag == "--threads")
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
    else if (flag == "--profile-steps")
      o.profile_steps = value == "0" ? 0 : static_cast<int>(positive(flag, value));
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

// The reference GPT in the recipe's parametrisation (unit recipes train the
// unit-scaled model, as `mantissa train` does).
nn::GPTConfig gpt_config(const Options& o, const recipe::Recipe& recipe) {
  nn::GPTConfig c;
  c.unit.enabled = recipe::unit_scaled(recipe.parametrisation);
  c.unit.umup = recipe.parametrisation == recipe::Parametrisation::umup;
  c.vocab = o.vocab;
  c.context = o.seq_len;
  c.layers = o.layers;
  c.d_model = o.d_model;
  c.heads = o.heads;
  c.seed = 0;
  c.validate();
  return c;
}

train::TrainConfig adamw_config() {  // the settings bench/torch_gpt.py uses
  train::TrainConfig c;
  c.optimizer = "adamw";
  c.beta1 = 0.9;
  c.beta2 = 0.999;
  c.weight_decay = 0.01;
  c.lr = 1e-3;
  return c;
}

// Measured matrix-product peak of this machine through the same wrapper: a
// 1024^3 product with a pre-packed B, median of 5 (GFLOP/s), f32 and bf16.
struct Peaks {
  double f32 = 0, bf16 = 0;
  double fma = 0, dpbf16 = 0;  // register-level probes (bench/peak_probe.hpp)
};

double peak_of(DType type) {
  const int64_t n = 1024;
  std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(static_cast<size_t>(n * n), 0.25f),
      c(static_cast<size_t>(n * n));
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  kernels::f32_to_bf16(a16.data(), a.data(), n * n);
  kernels::f32_to_bf16(b16.data(), b.data(), n * n);
  kernels::MatmulArgs args = kernels::MatmulArgs::product(n, n, n).with_types(type, type).with_constant_b(
      type == DType::bf16 ? static_cast<const void*>(b16.data()) : b.data(), 0);
  const void* A = type == DType::bf16 ? static_cast<const void*>(a16.data()) : a.data();
  std::vector<double> s;
  for (int i = 0; i < 6; ++i) s.push_back(seconds_of([&] { kernels::matmul(args, A, args.b_cache_key, c.data()); }));
  s.erase(s.begin());  // the first call creates the primitive and packs B
  kernels::forget_packed_operand(args.b_cache_key);
  return 2.0 * static_cast<double>(n * n * n) / median(s) * 1e-9;
}

// Per-category kernel time of `steps` profiled training steps (ms per step),
// the optimizer's step timed on its own, and the rest as framework overhead.
nlohmann::ordered_json breakdown(train::Trainer& trainer, optim::Optimizer& optimizer, int steps,
                                 double peak_gflops, double fma_gflops) {
  namespace prof = cpu::profile;
  prof::reset();
  prof::enable(true);
  std::vector<double> step_s;
  for (int i = 0; i < steps; ++i) step_s.push_back(seconds_of([&] { trainer.train_step(); }));
  prof::enable(false);
  const prof::Totals t = prof::totals();
  // The optimizer alone, on the gradients the last step left (weights move a
  // little further; nothing is measured after this).
  std::vector<double> opt_s;
  for (int i = 0; i < steps; ++i) opt_s.push_back(seconds_of([&] { optimizer.step(1e-3); }));
  double step_ms = 0;
  for (double s : step_s) step_ms += s * 1e3 / steps;
  nlohmann::ordered_json ms, share;
  double accounted = 0;
  for (int c = 0; c < prof::kCategories; ++c) {
    const double v = t.seconds[static_cast<size_t>(c)] * 1e3 / steps;
    ms[prof::category_name(static_cast<prof::Category>(c))] = v;
    accounted += v;
  }
  const double opt_ms = std::min(median(opt_s) * 1e3, std::max(0.0, step_ms - accounted));
  ms["optimizer"] = opt_ms;
  ms["overhead"] = std::max(0.0, step_ms - accounted - opt_ms);
  for (auto& [k, v] : ms.items()) share[k] = v.get<double>() / step_ms;
  const double mm_s = t.seconds[static_cast<size_t>(prof::Category::matmul)];
  const double att_s = t.seconds[static_cast<size_t>(prof::Category::attention)];
  const double mm_gflops = mm_s > 0 ? t.matmul_flops / mm_s * 1e-9 : 0.0;
  const double step_gflops = (t.matmul_flops + t.attention_flops) / (step_ms * 1e-3 * steps) * 1e-9;
  return {{"profiled_step_ms", step_ms},
          {"ms", ms},
          {"share", share},
          {"matmul_gflops", mm_gflops},
          {"attention_gflops", att_s > 0 ? t.attention_flops / att_s * 1e-9 : 0.0},
          {"step_gflops", step_gflops},
          {"peak_gflops", peak_gflops},
          {"matmul_fraction_of_peak", peak_gflops > 0 ? mm_gflops / peak_gflops : 0.0},
          {"step_fraction_of_peak", peak_gflops > 0 ? step_gflops / peak_gflops : 0.0},
          {"step_fraction_of_fma_peak", fma_gflops > 0 ? step_gflops / fma_gflops : 0.0}};
}

// Peak memory of the timed steps, from the engine's counting allocator.
// Activations and workspace count from the level before the step (what the
// step itself adds: for activations, mostly what the forward pass keeps for
// backward); the total is the whole process's live tensors at the step's
// peak, parameters, gradients and optimizer state included. FP8 block
// exponents (BlockScales vectors) are ordinary heap memory and not counted.
struct StepMemory {
  size_t activation = 0, workspace = 0, total = 0, weights_state = 0;
  void add(const MemoryStats& before, const MemoryStats& after) {
    activation = std::max(activation, after.peak_of(MemoryKind::activation) - before.of(MemoryKind::activation));
    workspace = std::max(workspace, after.peak_of(MemoryKind::workspace) - before.of(MemoryKind::workspace));
    total = std::max(total, after.peak_total);
    weights_state = std::max(weights_state, after.of(MemoryKind::parameter) + after.of(MemoryKind::gradient) +
                                                after.of(MemoryKind::optimizer_state));
  }
  nlohmann::ordered_json json() const {
    return {{"activation_peak_bytes", activation},
            {"workspace_peak_bytes", workspace},
            {"total_peak_bytes", total},
            {"parameters_gradients_state_bytes", weights_state}};
  }
};

// A recipe name with optional field overrides, "fp8-delayed:saved_format=bf16[:key=value...]"
// (recipe::set_recipe_field), so variants of a recipe compare in one run.
recipe::Recipe recipe_of(const std::string& spec) {
  std::stringstream ss(spec);
  std::string part;
  std::getline(ss, part, ':');
  recipe::Recipe r = recipe::find_recipe(part);
  while (std::getline(ss, part, ':')) {
    const size_t eq = part.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("recipe override '" + part + "' is not key=value");
    recipe::set_recipe_field(r, part.substr(0, eq), part.substr(eq + 1));
  }
  recipe::validate_recipe(r);
  return r;
}

// The whole training step as `mantissa train` runs it, under one recipe.
nlohmann::ordered_json time_recipe(const Options& o, const std::string& recipe_name, const Peaks& peaks) {
  recipe::Recipe recipe = recipe_of(recipe_name);
  std::unique_ptr<nn::Model> owned;
  if (o.model == "llama") {
    const nn::GPTConfig g = gpt_config(o, recipe);
    nn::LlamaConfig l;
    l.vocab = g.vocab;
    l.context = g.context;
    l.layers = g.layers;
    l.d_model = g.d_model;
    l.heads = g.heads;
    l.unit = g.unit;
    owned = std::make_unique<nn::Llama>(l);
  } else {
    owned = std::make_unique<nn::GPT>(gpt_config(o, recipe));
  }
  nn::Model& model = *owned;
  auto optimizer = train::make_optimizer(adamw_config(), model, recipe);  // u-muP rules for unit models
  RandomTokens source(o.batch, o.seq_len, o.vocab);
  train::TrainerOptions options;
  options.schedule.max_lr = options.schedule.min_lr = 1e-3;  // constant, as in torch_gpt.py
  train::Trainer trainer(model, *optimizer, source, nullptr, recipe, options);
  std::vector<double> times;
  nlohmann::ordered_json fp8;
  double first_loss = 0;
  StepMemory mem;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    train::StepMetrics m;
    const MemoryStats before = memory_stats();
    reset_peak_memory();
    double s = seconds_of([&] { m = trainer.train_step(); });
    if (!std::isfinite(m.loss))
      throw std::runtime_error(recipe_name + ": non-finite loss at step " + std::to_string(step));
    if (step == 0) first_loss = m.loss;
    if (step >= o.warmup) {
      times.push_back(s);
      mem.add(before, memory_stats());
    }
  }
  // FP8 casts per step (current scaling redoes a cast whose exponent moved).
  if (const auto* q = dynamic_cast<const quant::Fp8Quantiser*>(model.precision().quantiser.get())) {
    const quant::Fp8Stats st = q->stats();
    const double steps = o.warmup + o.steps;
    fp8 = {{"casts_per_step", st.casts / steps},
           {"recasts_per_step", st.recasts / steps},
           {"weight_casts_per_step", st.weight_casts / steps}};
  }
  // 1-byte saved activations encoded twice because their exponent moved.
  if (const auto& h = model.precision().saved_hints) {
    const double steps = o.warmup + o.steps;
    fp8["saved_per_step"] = static_cast<double>(h->saves) / steps;
    fp8["saved_reencodes_per_step"] = static_cast<double>(h->reencodes) / steps;
  }
  double med = median(times);
  const bool low = model.precision().matmul != DType::f32;
  nlohmann::ordered_json out = {{"tokens_per_s", static_cast<double>(o.batch * o.seq_len) / med},
                                {"step_ms", med * 1e3},
                                {"first_loss", first_loss},
                                {"memory", mem.json()}};
  if (!fp8.is_null()) out["fp8"] = fp8;
  if (o.profile_steps > 0)
    out["breakdown"] = breakdown(trainer, *optimizer, o.profile_steps, low ? peaks.bf16 : peaks.f32, peaks.fma);
  if (o.memory_trace) {
    start_memory_trace();
    trainer.train_step();
    out["memory_trace"] = bench_memory::trace_table(stop_memory_trace(), recipe_name);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench_args::program() = "bench_train";
  Options o = parse(argc, argv);
  try {
    kernels::set_num_threads(o.threads);
    nlohmann::ordered_json out = {{"threads", kernels::num_threads()},
                                  {"layers", o.layers},
                                  {"model", o.model},
                                  {"d_model", o.d_model},
                                  {"heads", o.heads},
                                  {"seq_len", o.seq_len},
                                  {"batch", o.batch},
                                  {"vocab", o.vocab},
                                  {"steps", o.steps},
                                  {"warmup", o.warmup}};
    const Peaks peaks{peak_of(DType::f32), peak_of(DType::bf16), bench_peak::probe(false), bench_peak::probe(true)};
    out["peak_gflops"] = {{"f32", peaks.f32}, {"bf16", peaks.bf16}, {"fma_probe", peaks.fma},
                          {"dpbf16_probe", peaks.dpbf16}};
    out["matmul_route"] = kernels::matmul_route_summary();
    out["matmul_isa"] = kernels::matmul_isa_name();
    out["kernel_isa"] = cpu::isa_name(cpu::active_isa());
    out["host_isa"] = cpu::isa_name(cpu::detected_isa());
    for (const std::string& r : o.recipes) {
      nlohmann::ordered_json m;
      try {  // a recipe this build does not have (or cannot run) yet is skipped with the reason
        m = time_recipe(o, r, peaks);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mantissa %-10s skipped: %s\n", r.c_str(), e.what());
        out["skipped"][r] = e.what();
        continue;
      }
      const auto& mem = m["memory"];
      auto mib = [&](const char* key) { return static_cast<double>(mem[key].get<size_t>()) / 1048576.0; };
      std::fprintf(stderr,
                   "mantissa %-10s %9.1f tokens/s  %8.2f ms/step  peak MiB: activations %.2f workspace %.2f "
                   "total %.2f (params+grads+state %.2f)\n",
                   r.c_str(), m["tokens_per_s"].get<double>(), m["step_ms"].get<double>(), mib("activation_peak_bytes"),
                   mib("workspace_peak_bytes"), mib("total_peak_bytes"), mib("parameters_gradients_state_bytes"));
      out["recipes"][r] = m;
    }
    std::printf("%s\n", out.dump().c_str());
  } catch (const std::invalid_argument& e) {
    usage_error(e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
