// Blockwise (flash-style) attention against the whole-scores kernels, forward +
// backward, causal (GPT) at T = 128, 512, 1024 and key-padded (BERT: sequence b
// keeps T - (b % 4) T / 8 keys) at T = 512, 1024, 2048, with the tokens per step
// fixed (B*T = 2048, C 256, 4 heads of 64), fp32 and bf16 products, 2 threads.
// Prints, in one run:
// median step time of each path (alternating calls, so load hits both alike),
// the ratio blockwise / whole, and the peak memory each path adds (measured in
// a fresh child process: VmHWM after resetting it, minus the resident set
// before the pass) next to the bytes it saves for backward.
//
//   bench_attention [--benchmark_filter=...]   (Google Benchmark cases, then the table)
//   MANTISSA_BENCH_REPS=N (default 9), MANTISSA_BENCH_THREADS=N (default 2)
#include <benchmark/benchmark.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "mantissa/kernels/kernels.hpp"

namespace {

using namespace mantissa::kernels;

constexpr int64_t kTokens = 2048, kC = 256, kHeads = 4;
const int64_t kLengths[] = {128, 512, 1024};
const int64_t kPaddedLengths[] = {512, 1024, 2048};

struct Problem {
  int64_t B, T;
  bool padded;  // key-padded (BERT) attention, else causal
  std::vector<float> qkv, dout, out, dqkv;
  std::vector<int32_t> key_len;
  Problem(int64_t t, bool pad) : B(kTokens / t), T(t), padded(pad) {
    for (int64_t b = 0; b < B; ++b) key_len.push_back(static_cast<int32_t>(T - (b % 4) * T / 8));
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    qkv.resize(static_cast<size_t>(B * T * 3 * kC));
    dout.resize(static_cast<size_t>(B * T * kC));
    for (auto& x : qkv) x = d(rng);
    for (auto& x : dout) x = d(rng);
    out.resize(dout.size());
    dqkv.assign(qkv.size(), 0.0f);
  }
  size_t rows() const { return static_cast<size_t>(B * kHeads * T); }
  // Saved tensors and scratch, made on first use and reused (the autograd op
  // takes them from the step's arena, which is reused across steps).
  std::vector<float> att, datt, lse;
  std::vector<uint16_t> att16;
};

// One forward + backward as the autograd op runs it.
void whole_pass(Problem& p, bool bf16) {
  const size_t n = p.rows() * static_cast<size_t>(p.T);
  p.datt.resize(n);
  if (p.padded) {  // BERT keeps fp32 probabilities under either product type
    p.att.resize(n);
    attention_forward_keys(p.out.data(), p.att.data(), p.qkv.data(), p.key_len.data(), p.B, p.T, kC, kHeads, bf16);
    attention_backward_keys(p.dqkv.data(), p.datt.data(), p.dout.data(), p.qkv.data(), p.att.data(),
                            p.key_len.data(), p.B, p.T, kC, kHeads, bf16);
  } else if (bf16) {  // bf16-amp keeps the probabilities as bf16 codes
    p.att16.resize(n);
    attention_forward_bf16(p.out.data(), p.att16.data(), p.qkv.data(), p.B, p.T, kC, kHeads);
    attention_backward_bf16(p.dqkv.data(), p.datt.data(), p.dout.data(), p.qkv.data(), p.att16.data(), p.B, p.T,
                            kC, kHeads);
  } else {
    p.att.resize(n);
    attention_forward(p.out.data(), p.att.data(), p.qkv.data(), p.B, p.T, kC, kHeads, false);
    attention_backward(p.dqkv.data(), p.datt.data(), p.dout.data(), p.qkv.data(), p.att.data(), p.B, p.T, kC,
                       kHeads, false);
  }
}

void blockwise_pass(Problem& p, bool bf16) {
  p.lse.resize(p.rows());
  if (p.padded) {
    attention_forward_keys_blockwise(p.out.data(), p.lse.data(), p.qkv.data(), p.key_len.data(), p.B, p.T, kC,
                                     kHeads, bf16);
    attention_backward_keys_blockwise(p.dqkv.data(), p.dout.data(), p.qkv.data(), p.lse.data(), p.key_len.data(),
                                      p.B, p.T, kC, kHeads, bf16);
    return;
  }
  attention_forward_blockwise(p.out.data(), p.lse.data(), p.qkv.data(), p.B, p.T, kC, kHeads, bf16);
  attention_backward_blockwise(p.dqkv.data(), p.dout.data(), p.qkv.data(), p.lse.data(), p.B, p.T, kC, kHeads,
                               bf16);
}

void run_pass(Problem& p, bool blockwise, bool bf16) {
  if (blockwise) {
    blockwise_pass(p, bf16);
  } else {
    whole_pass(p, bf16);
  }
}

void bm_pass(benchmark::State& state, bool blockwise, bool bf16, bool padded) {
  Problem p(state.range(0), padded);
  run_pass(p, blockwise, bf16);
  for (auto _ : state) {
    run_pass(p, blockwise, bf16);
    benchmark::ClobberMemory();
  }
  state.SetLabel("B=" + std::to_string(p.B) + " T=" + std::to_string(p.T));
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Paired {
  double wall_w, wall_b, cpu_w, cpu_b;  // median seconds per pass: whole, blockwise
};

// Whole and blockwise passes alternating; wall time and process CPU time (the
// latter is what a busy shared machine distorts least).
Paired paired(int64_t T, bool bf16, bool padded, int reps) {
  Problem p(T, padded);
  run_pass(p, false, bf16);
  run_pass(p, true, bf16);
  std::vector<double> ww, wb, cw, cb;
  for (int i = 0; i < reps; ++i) {
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    run_pass(p, false, bf16);
    const double c1 = cpu_seconds();
    const auto t1 = std::chrono::steady_clock::now();
    run_pass(p, true, bf16);
    const double c2 = cpu_seconds();
    const auto t2 = std::chrono::steady_clock::now();
    ww.push_back(std::chrono::duration<double>(t1 - t0).count());
    wb.push_back(std::chrono::duration<double>(t2 - t1).count());
    cw.push_back(c1 - c0);
    cb.push_back(c2 - c1);
  }
  return {median(ww), median(wb), median(cw), median(cb)};
}

int64_t status_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t len = std::strlen(field);
  while (std::getline(f, line))
    if (line.compare(0, len, field) == 0) return std::atoll(line.c_str() + len + 1);
  return -1;
}

// Child: one pass of one path in a fresh process; prints the peak growth in KiB.
int memory_child(bool blockwise, bool bf16, bool padded, int64_t T) {
  Problem p(T, padded);
  { std::ofstream("/proc/self/clear_refs") << "5"; }  // resets VmHWM to the current RSS
  const int64_t before = status_kib("VmRSS:");
  run_pass(p, blockwise, bf16);
  std::printf("%lld\n", static_cast<long long>(status_kib("VmHWM:") - before));
  return 0;
}

double peak_mib(bool blockwise, bool bf16, bool padded, int64_t T) {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return -1;
  exe[len] = 0;
  const std::string cmd = std::string(exe) + " --memory-child " + std::string(blockwise ? "1 " : "0 ") +
                          (bf16 ? "1 " : "0 ") + (padded ? "1 " : "0 ") + std::to_string(T);
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return -1;
  long long kib = -1;
  if (std::fscanf(f, "%lld", &kib) != 1) kib = -1;
  pclose(f);
  return static_cast<double>(kib) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  if (const char* env = std::getenv("MANTISSA_BENCH_THREADS")) threads = std::max(1, std::atoi(env));
  set_num_threads(threads);
  if (argc == 6 && std::strcmp(argv[1], "--memory-child") == 0)
    return memory_child(std::atoi(argv[2]) != 0, std::atoi(argv[3]) != 0, std::atoi(argv[4]) != 0, std::atoll(argv[5]));
  int reps = 9;
  if (const char* env = std::getenv("MANTISSA_BENCH_REPS")) reps = std::max(1, std::atoi(env));
  for (bool padded : {false, true}) {
    for (bool bf16 : {false, true}) {
      for (bool blockwise : {false, true}) {
        const std::string name =
            std::string(blockwise ? "blockwise" : "whole") + (bf16 ? "/bf16" : "/f32") + (padded ? "/padded" : "");
        auto* b = benchmark::RegisterBenchmark(name.c_str(), bm_pass, blockwise, bf16, padded);
        for (int64_t T : padded ? kPaddedLengths : kLengths) b->Arg(T);
        b->Unit(benchmark::kMillisecond)->UseRealTime();
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();

  std::printf("\nAttention forward+backward, %lld tokens, C %lld, %lld heads, %d threads, median of %d alternating passes\n",
              static_cast<long long>(kTokens), static_cast<long long>(kC), static_cast<long long>(kHeads),
              num_threads(), reps);
  std::printf("%-6s %-5s %-5s %4s %9s %9s %7s %8s | %11s %11s | %10s %10s\n", "mask", "type", "T", "B", "whole ms", "block ms",
              "blk/whl", "cpu b/w", "saved whole", "saved block", "peak whole", "peak block");
  for (bool padded : {false, true})
    for (bool bf16 : {false, true})
      for (int64_t T : padded ? kPaddedLengths : kLengths) {
        const Paired m = paired(T, bf16, padded, reps);
        const double rows = static_cast<double>(kTokens / T * kHeads * T);
        const double saved_whole = rows * static_cast<double>(T) * (bf16 && !padded ? 2.0 : 4.0) / (1 << 20);
        const double saved_block = rows * 4.0 / (1 << 20);
        std::printf("%-6s %-5s %-5lld %4lld %9.2f %9.2f %7.3f %8.3f | %8.2fMiB %8.3fMiB | %7.1fMiB %7.1fMiB\n",
                    padded ? "padded" : "causal", bf16 ? "bf16" : "f32", static_cast<long long>(T),
                    static_cast<long long>(kTokens / T), m.wall_w * 1e3, m.wall_b * 1e3, m.wall_b / m.wall_w,
                    m.cpu_b / m.cpu_w, saved_whole, saved_block, peak_mib(false, bf16, padded, T),
                    peak_mib(true, bf16, padded, T));
      }
  // The smallest power-of-two T (one sequence) from which the autograd op goes blockwise.
  const auto from = [](bool bf16, bool causal) {
    for (int64_t T = 64; T <= (1 << 16); T *= 2)
      if (attention_prefers_blockwise(1, T, kHeads, bf16, causal)) return static_cast<long long>(T);
    return -1LL;
  };
  std::printf("the autograd op takes the blockwise path from T = %lld (f32 products) / %lld (bf16 products) causal, "
              "%lld / %lld key-padded\n",
              from(false, true), from(true, true), from(false, false), from(true, false));
  benchmark::Shutdown();
  return 0;
}
