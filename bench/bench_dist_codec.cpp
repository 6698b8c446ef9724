// The data-parallel gradient wire codecs (dist::WireCodec) on one thread, on
// the reference GPT's gradient size (3.26 M values), each beside a memcpy of
// the same fp32 bytes timed in the same run (counter `vs_memcpy` = codec time
// / memcpy time; `ns_per_value`). bench/project_dist_scaling.py takes the
// codec cost per value from here (docs/distributed.md).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

#include "mantissa/dist/reduce.hpp"

namespace md = mantissa::dist;

namespace {

constexpr int64_t kValues = 3'260'416;  // a multiple of 128 x 16

const std::vector<float>& gradient() {
  static const std::vector<float> g = [] {
    std::vector<float> v(static_cast<size_t>(kValues));
    std::mt19937 rng(1);
    std::lognormal_distribution<float> mag(-9.0f, 2.0f);
    for (float& x : v) x = (rng() & 1 ? 1.0f : -1.0f) * mag(rng);
    return v;
  }();
  return g;
}

double memcpy_seconds() {
  static const double s = [] {
    std::vector<float> dst(static_cast<size_t>(kValues));
    double best = 1e9;
    for (int r = 0; r < 5; ++r) {
      const double t0 = omp_get_wtime();
      std::memcpy(dst.data(), gradient().data(), dst.size() * sizeof(float));
      benchmark::DoNotOptimize(dst.data());
      best = std::min(best, omp_get_wtime() - t0);
    }
    return best;
  }();
  return s;
}

const md::WireFormat kFormats[] = {md::WireFormat::fp32, md::WireFormat::bf16, md::WireFormat::e4m3, md::WireFormat::e5m2};
const char* kNames[] = {"fp32", "bf16", "fp8-e4m3", "fp8-e5m2"};

void codec(benchmark::State& state, bool encode) {
  omp_set_num_threads(1);
  const md::WireCodec c(kFormats[state.range(0)], 128);
  std::vector<uint8_t> wire(c.encoded_bytes(kValues));
  std::vector<float> out(static_cast<size_t>(kValues));
  c.encode(gradient().data(), wire.data(), kValues);
  double seconds = 0;
  for (auto _ : state) {
    const double t0 = omp_get_wtime();
    if (encode) c.encode(gradient().data(), wire.data(), kValues);
    else c.decode(wire.data(), out.data(), kValues);
    seconds += omp_get_wtime() - t0;
    benchmark::ClobberMemory();
  }
  const double per = seconds / static_cast<double>(state.iterations());
  state.counters["ns_per_value"] = per / static_cast<double>(kValues) * 1e9;
  state.counters["vs_memcpy"] = per / memcpy_seconds();
  state.counters["wire_bytes"] = static_cast<double>(wire.size());
  state.SetLabel(kNames[state.range(0)]);
}

void BM_encode(benchmark::State& s) { codec(s, true); }
void BM_decode(benchmark::State& s) { codec(s, false); }
BENCHMARK(BM_encode)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
