// Conversion throughput in GB/s of fp32 input, each beside a memcpy of the
// same bytes measured in the same run (counter `vs_memcpy` = conversion rate
// / memcpy rate). Two sizes: 64 Mi elements (memory bound, OpenMP threads)
// and 32 Ki elements (cache resident, one thread, under kParallelThreshold).
// Compare with numpy + ml_dtypes (alternating rounds, same machine load):
//   bash scripts/pyrun.sh bench/numpy_convert.py --cpp <this binary> --rounds 3
// Figures and the memory-bandwidth argument: docs/formats-speed.md.
// The fused FP8 cast of the training step (formats::ScaledCast, 4096-value
// pieces as quant/fp8_cast.cpp runs it) is timed on the cache-resident size
// on one thread, each beside the hardware bf16 cast of the same values that
// bf16-amp does instead (counter `vs_bf16` = its time / the bf16 cast's).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/mx.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/formats/scaled_cast.hpp"

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

// ---- the fused FP8 cast, in the pieces the training step uses ----------------------------
constexpr size_t kPiece = 4096;

enum class CastKind { codes_and_decode, codes, decode, mx_blocks, tile_blocks };

// ns of a bf16 cast of the cache-resident input, best of a few repetitions.
double bf16_cast_ns(size_t n) {
  const std::vector<float>& src = input(n);
  std::vector<uint16_t> dst(n);
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 2000; ++i) {
      for (size_t b = 0; b < n; b += kPiece) mf::quantize(mf::preset("bf16"), src.data() + b, dst.data() + b, kPiece);
      benchmark::ClobberMemory();
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 2000);
  }
  return best * 1e9;
}

void bm_fp8_cast(benchmark::State& state, CastKind kind) {
  const size_t n = kSmall;
  const mf::Format& f = mf::preset("e4m3fn");
  mf::Table16 table{};
  for (uint32_t c = 0; c < 256; ++c)
    table[c] = static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(mf::decode_f32(f, c))) >> 16);
  const mf::ScaledCast cast(f, true, table);
  const std::vector<float>& in = input(n);
  std::vector<uint8_t> codes(n);
  std::vector<uint16_t> decoded(n);
  std::vector<int8_t> exponents(n / 32);
  mf::BlockRule rule;  // blockwise's rule for e4m3fn: smallest E with amax 2^-E <= 448
  rule.offset = 8;
  rule.max_fraction = 0x600000;
  rule.round_up = true;
  const float mult = 16.0f;
  for (auto _ : state) {
    for (size_t b = 0; b < n; b += kPiece) {
      uint8_t* c = kind == CastKind::decode ? nullptr : codes.data() + b;
      uint16_t* d = kind == CastKind::codes ? nullptr : decoded.data() + b;
      if (kind == CastKind::mx_blocks || kind == CastKind::tile_blocks) {
        const size_t block = kind == CastKind::mx_blocks ? 32 : 128;
        cast.run_blocks(in.data() + b, kPiece, block, rule, exponents.data() + b / 32, c, d);
      } else {
        cast.run(in.data() + b, kPiece, &mult, kPiece, c, d);
      }
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
  state.counters["bf16_ns"] = bf16_cast_ns(n);
}

// vs_memcpy = conversion GB/s / memcpy GB/s, both measured in this process;
// vs_bf16 = the FP8 cast's time / the bf16 cast's.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> out = runs;
    for (Run& r : out) {
      if (r.iterations == 0) continue;
      const double conv_ns = r.GetAdjustedRealTime() * (r.time_unit == benchmark::kMillisecond ? 1e6 :
                                                        r.time_unit == benchmark::kMicrosecond ? 1e3 : 1.0);
      if (auto it = r.counters.find("memcpy_ns"); it != r.counters.end()) {
        r.counters["vs_memcpy"] = it->second.value / conv_ns;
        r.counters.erase(it);
      }
      if (auto it = r.counters.find("bf16_ns"); it != r.counters.end()) {
        r.counters["vs_bf16"] = conv_ns / it->second.value;
        r.counters.erase(it);
      }
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
BENCHMARK_CAPTURE(bm_fp8_cast, e4m3fn_codes_and_decode, CastKind::codes_and_decode)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_fp8_cast, e4m3fn_codes, CastKind::codes)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_fp8_cast, e4m3fn_decode, CastKind::decode)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_fp8_cast, e4m3fn_mx_blocks_32, CastKind::mx_blocks)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_fp8_cast, e4m3fn_tile_blocks_128, CastKind::tile_blocks)->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter console;
  benchmark::RunSpecifiedBenchmarks(&console);
  benchmark::Shutdown();
  return 0;
}
