// Activation checkpointing: memory saved against time paid.
// An 8-layer GPT at T 256 runs forward + backward with every block stored
// (the reference) and with every k-th block recomputed in backward; the
// engine's allocator reports the peak bytes of activations (and of the
// workspace that low-precision copies use) above what was allocated before
// the step. Prints one line per setting with ratios to the reference, then a
// JSON object.
//
//   bench_checkpoint [--threads 2] [--layers 8] [--d-model 256] [--heads 4]
//                    [--seq-len 256] [--batch 8] [--every 1,2] [--recipe fp32]
//                    [--steps 5] [--warmup 2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "mantissa/amp/amp.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/gpt.hpp"
#include "mantissa/tensor/memory.hpp"

namespace {

using namespace mantissa;

struct Options {
  int threads = 2;
  int64_t layers = 8, d_model = 256, heads = 4, seq_len = 256, batch = 8;
  std::vector<int> every = {1, 2};
  std::string recipe = "fp32";
  int steps = 5, warmup = 2;
};

using bench_args::positive;
using bench_args::usage_error;

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "bench_checkpoint [--threads N] [--layers L] [--d-model C] [--heads H] [--seq-len T]\n"
          "                 [--batch B] [--every k1,k2] [--recipe R] [--steps N] [--warmup N]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) usage_error("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--threads") o.threads = static_cast<int>(positive(flag, value));
    else if (flag == "--layers") o.layers = positive(flag, value);
    else if (flag == "--d-model") o.d_model = positive(flag, value);
    else if (flag == "--heads") o.heads = positive(flag, value);
    else if (flag == "--seq-len") o.seq_len = positive(flag, value);
    else if (flag == "--batch") o.batch = positive(flag, value);
    else if (flag == "--steps") o.steps = static_cast<int>(positive(flag, value));
    else if (flag == "--warmup") o.warmup = static_cast<int>(positive(flag, value));
    else if (flag == "--recipe") o.recipe = value;
    else if (flag == "--every") {
      o.every.clear();
      std::stringstream ss(value);
      for (std::string k; std::getline(ss, k, ',');) o.every.push_back(static_cast<int>(positive(flag, k)));
    } else usage_error("unknown flag " + flag + " (see --help)");
  }
  return o;
}

struct Measurement {
  double step_ms = 0;            // median forward + backward
  size_t activation_peak = 0;    // bytes above the pre-step level
  size_t workspace_peak = 0;
  double loss = 0;
};

Measurement measure(const Options& o, int every, const nn::Batch& batch) {
  nn::GPTConfig c;
  c.layers = o.layers;
  c.d_model = o.d_model;
  c.heads = o.heads;
  c.context = o.seq_len;
  c.validate();
  nn::GPT model(c);
  model.set_precision(amp::precision_policy(recipe::find_recipe(o.recipe), &model));
  model.set_activation_checkpointing(every);
  const float grad_scale = 1.0f / static_cast<float>(o.batch * o.seq_len);
  std::vector<double> times;
  Measurement m;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    model.zero_grad();
    const MemoryStats before = memory_stats();
    reset_peak_memory();
    const auto t0 = std::chrono::steady_clock::now();
    m.loss = model.forward_backward(batch, grad_scale).sum;
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const MemoryStats after = memory_stats();
    m.activation_peak = std::max(m.activation_peak, after.peak_of(MemoryKind::activation) - before.of(MemoryKind::activation));
    m.workspace_peak = std::max(m.workspace_peak, after.peak_of(MemoryKind::workspace) - before.of(MemoryKind::workspace));
  }
  times.erase(times.begin(), times.begin() + o.warmup);
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  m.step_ms = times[times.size() / 2] * 1e3;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  bench_args::program() = "bench_checkpoint";
  const Options o = parse(argc, argv);
  try {
    kernels::set_num_threads(o.threads);
    std::mt19937 rng(7);
    nn::Batch batch{Tensor::empty({o.batch, o.seq_len}, DType::i32), Tensor::empty({o.batch, o.seq_len}, DType::i32)};
    for (int64_t i = 0; i < o.batch * o.seq_len; ++i) {
      batch.inputs.data<int32_t>()[i] = static_cast<int32_t>(rng() % 256);
      batch.targets.data<int32_t>()[i] = static_cast<int32_t>(rng() % 256);
    }
    const Measurement ref = measure(o, 0, batch);
    nlohmann::ordered_json out = {{"threads", kernels::num_threads()}, {"layers", o.layers},   {"d_model", o.d_model},
                                  {"heads", o.heads},                  {"seq_len", o.seq_len}, {"batch", o.batch},
                                  {"recipe", o.recipe}};
    auto row = [&](int every, const Measurement& m) {
      const double mem_ratio = static_cast<double>(ref.activation_peak) / static_cast<double>(std::max<size_t>(m.activation_peak, 1));
      const double time_ratio = m.step_ms / ref.step_ms;
      std::fprintf(stderr, "every %-2d  step %8.1f ms (x%.2f)  activations %8.1f MiB (%.2fx less)  workspace %7.1f MiB\n",
                   every, m.step_ms, time_ratio, static_cast<double>(m.activation_peak) / 1048576.0, mem_ratio,
                   static_cast<double>(m.workspace_peak) / 1048576.0);
      out["runs"].push_back({{"every", every},
                             {"step_ms", m.step_ms},
                             {"activation_peak_bytes", m.activation_peak},
                             {"workspace_peak_bytes", m.workspace_peak},
                             {"time_ratio", time_ratio},
                             {"activation_memory_reduction", mem_ratio},
                             {"loss_equal_to_reference", m.loss == ref.loss}});
    };
    row(0, ref);
    for (int k : o.every) row(k, measure(o, k, batch));
    std::printf("%s\n", out.dump().c_str());
  } catch (const std::invalid_argument& e) {
    usage_error(e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
