// Conversion throughput in GB/s of fp32 input, each beside a memcpy of the
// same bytes measured in the same run (counter `vs_memcpy` = conversion rate
// / memcpy rate). Two sizes: 64 Mi elements (memory bound, OpenMP threads)
// and 32 Ki elements (cache resident, one thread, under kParallelThreshold).
// Compare with numpy + ml_dtypes (alternating rounds, same machine load):
//   bash scripts/pyrun.sh bench/numpy_convert.py --cpp <this binary> --rounds 3
// Figures and the memory-bandwidth argument: docs/formats-speed.md.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/mx.hpp"

namespace mf = mantissa::formats;

namespace {

constexpr size_t kLarge = size_t{64} << 20;
constexpr size_t kSmall = size_t{32} << 10;

const std::vector<float>& input(size_t n) {
  static std::vector<float> large, small;
  std::vector<float>& v = n == kLarge ? large : small;
  if (v.size() != n) {
    v.resize(n);
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 3.0f);
    for (float& x : v) x = dist(rng);
  }
  return v;
}

// The same split as the converters: one thread below the threshold.
void copy(void* dst, const void* src, size_t bytes, size_t elements) {
  if (elements < mf::kParallelThreshold) {
    std::memcpy(dst, src, bytes);
    return;
  }
#pragma omp parallel
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num()), nt = static_cast<size_t>(omp_get_num_threads());
    const size_t chunk = (bytes + nt - 1) / nt / 64 * 64 + 64;
    const size_t b = std::min(bytes, t * chunk), e = std::min(bytes, b + chunk);
    if (b < e) std::memcpy(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, e - b);
  }
}

// GB/s of a memcpy of the fp32 input's bytes, best of a few repetitions.
double memcpy_gbps(size_t n) {
  static std::vector<float> dst;
  const std::vector<float>& src = input(n);
  dst.resize(n);
  const int reps = n == kLarge ? 5 : 2000;
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) {
      copy(dst.data(), src.data(), n * sizeof(float), n);
      benchmark::ClobberMemory();
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  return static_cast<double>(n * sizeof(float)) / best / 1e9;
}

void report(benchmark::State& state, size_t n) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * sizeof(float)));
  const double mc = memcpy_gbps(n);
  state.counters["memcpy_GBps"] = mc;
  state.counters["memcpy_ns"] = static_cast<double>(n * sizeof(float)) / mc;  // for the ratio below
}

void bm_quantize(benchmark::State& state, const char* format) {
  const size_t n = static_cast<size_t>(state.range(0));
  const mf::Format& f = mf::preset(format);
  const std::vector<float>& in = input(n);
  std::vector<uint8_t> out(n * static_cast<size_t>(f.storage_bytes()));
  for (auto _ : state) {
    mf::quantize(f, in.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  report(state, n);
  state.SetLabel(mf::last_kernel());
}

// The library API, mx_quantize_into, into preallocated code and scale buffers.
void bm_mx(benchmark::State& state, const char* name) {
  const size_t n = static_cast<size_t>(state.range(0));
  const mf::MxConfig cfg = mf::mx_preset(name);
  const std::vector<float>& in = input(n);
  std::vector<uint8_t> codes(n), scales((n + 31) / 32);
  for (auto _ : state) {
    mf::mx_quantize_into(cfg, in.data(), n, codes, scales);
    benchmark::DoNotOptimize(codes.data());
    benchmark::ClobberMemory();
  }
  report(state, n);
}

// mx_quantize, which allocates and zero-fills its result (MxArray) every call.
void bm_mx_alloc(benchmark::State& state, const char* name) {
  const size_t n = static_cast<size_t>(state.range(0));
  const mf::MxConfig cfg = mf::mx_preset(name);
  const std::vector<float>& in = input(n);
  for (auto _ : state) {
    mf::MxArray a = mf::mx_quantize(cfg, in.data(), n);
    benchmark::DoNotOptimize(a.codes.data());
  }
  report(state, n);
}

void bm_memcpy(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const std::vector<float>& in = input(n);
  std::vector<float> out(n);
  for (auto _ : state) {
    copy(out.data(), in.data(), n * sizeof(float), n);
    benchmark::ClobberMemory();
  }
  report(state, n);
}

// vs_memcpy = conversion GB/s / memcpy GB/s, both measured in this process.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> out = runs;
    for (Run& r : out) {
      auto it = r.counters.find("memcpy_ns");
      if (it == r.counters.end() || r.iterations == 0) continue;
      const double conv_ns = r.GetAdjustedRealTime() * (r.time_unit == benchmark::kMillisecond ? 1e6 : 1.0);
      r.counters["vs_memcpy"] = it->second.value / conv_ns;
      r.counters.erase(it);
    }
    ConsoleReporter::ReportRuns(out);
  }
};

}  // namespace

BENCHMARK(bm_memcpy)->Arg(kLarge)->Arg(kSmall)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_quantize, bf16, "bf16")->Arg(kLarge)->Arg(kSmall)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_quantize, fp16, "fp16")->Arg(kLarge)->Arg(kSmall)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_quantize, e4m3fn, "e4m3fn")->Arg(kLarge)->Arg(kSmall)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_quantize, e5m2, "e5m2")->Arg(kLarge)->Arg(kSmall)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_mx, mxfp8_e4m3, "mxfp8_e4m3")->Arg(kLarge)->Arg(kSmall)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_mx_alloc, mxfp8_e4m3, "mxfp8_e4m3")->Arg(kLarge)->Arg(kSmall)->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter console;
  benchmark::RunSpecifiedBenchmarks(&console);
  benchmark::Shutdown();
  return 0;
}
