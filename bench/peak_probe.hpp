// Register-level arithmetic peaks of this CPU, for the benchmark's fraction
// of the physical limit: every OpenMP thread runs long chains of independent
// fp32 FMAs (vfmadd231ps zmm) or bf16 dot products (vdpbf16ps zmm) on
// registers only, no memory traffic. 24 accumulators cover the FMA latency
// (4 cycles) times two ports. FLOPs: an FMA lane is 2; a vdpbf16ps lane
// multiplies and adds two pairs, 4.
#pragma once

#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdint>

namespace bench_peak {

constexpr int kAcc = 24;

// kAcc independent accumulators, each stepped `iters` times by STEP(acc).
#define BENCH_PEAK_CHAIN(INIT, STEP)                          \
  __m512 acc[kAcc];                                           \
  for (int i = 0; i < kAcc; ++i) acc[i] = INIT;               \
  for (int64_t it = 0; it < iters; ++it) {                    \
    _Pragma("GCC unroll 24") for (int i = 0; i < kAcc; ++i) { \
      acc[i] = STEP(acc[i]);                                  \
    }                                                         \
  }                                                           \
  __m512 s = acc[0];                                          \
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, acc[i]); \
  alignas(64) float lanes[16];                                 \
  _mm512_store_ps(lanes, s);                                   \
  return lanes[0]

__attribute__((target("avx512f"))) inline float fma_chain(int64_t iters) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
#define BENCH_PEAK_FMA(x) _mm512_fmadd_ps(x, a, b)
  BENCH_PEAK_CHAIN(_mm512_set1_ps(1.0f), BENCH_PEAK_FMA);
#undef BENCH_PEAK_FMA
}

__attribute__((target("avx512f,avx512bf16"))) inline float dpbf16_chain(int64_t iters) {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3c00);
#define BENCH_PEAK_DP(x) _mm512_dpbf16_ps(x, a, b)
  BENCH_PEAK_CHAIN(_mm512_setzero_ps(), BENCH_PEAK_DP);
#undef BENCH_PEAK_DP
}
#undef BENCH_PEAK_CHAIN

// GFLOP/s over all threads of the team; 0 when the CPU lacks the instruction.
// The best of `tries` runs (other processes on a shared machine only slow it).
inline double probe(bool bf16, int tries = 5) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) return 0;
  if (bf16 && !__builtin_cpu_supports("avx512bf16")) return 0;
  constexpr int64_t kIters = int64_t{1} << 21;
  const double flops_per_lane_op = bf16 ? 4.0 : 2.0;
  double best = 0;
  for (int t = 0; t < tries; ++t) {
    int threads = 1;
    volatile float sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
    {
#pragma omp single
      threads = omp_get_num_threads();
      const float r = bf16 ? dpbf16_chain(kIters) : fma_chain(kIters);
#pragma omp critical
      sink = sink + r;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double flops = flops_per_lane_op * 16.0 * kAcc * static_cast<double>(kIters) * threads;
    if (flops / s * 1e-9 > best) best = flops / s * 1e-9;
  }
  return best;
}

}  // namespace bench_peak
