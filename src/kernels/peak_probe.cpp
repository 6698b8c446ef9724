// Register-level arithmetic rates (see matmul_route.hpp): 24 independent
// accumulators (latency 4 cycles x two ports, with room) stepped by
// vfmadd231ps or vdpbf16ps on zmm registers, no memory traffic.
#include <immintrin.h>

#include <chrono>
#include <cstdint>

#include "mantissa/kernels/matmul_route.hpp"
#include "mantissa/cpu/isa.hpp"

namespace mantissa::kernels {
namespace {

constexpr int kAcc = 24;

// kAcc accumulators, each stepped `iters` times by STEP(acc); returns one lane
// of their sum so the chains cannot be optimised away.
#define MANTISSA_PROBE_CHAIN(INIT, STEP)                        \
  __m512 acc[kAcc];                                             \
  for (int i = 0; i < kAcc; ++i) acc[i] = INIT;                 \
  for (int64_t it = 0; it < iters; ++it) {                      \
    _Pragma("GCC unroll 24") for (int i = 0; i < kAcc; ++i) {   \
      acc[i] = STEP(acc[i]);                                    \
    }                                                           \
  }                                                             \
  __m512 s = acc[0];                                            \
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, acc[i]);  \
  alignas(64) float lanes[16];                                  \
  _mm512_store_ps(lanes, s);                                    \
  return lanes[0]

__attribute__((target("avx512f"))) float fma_chain(int64_t iters) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
#define MANTISSA_PROBE_FMA(x) _mm512_fmadd_ps(x, a, b)
  MANTISSA_PROBE_CHAIN(_mm512_set1_ps(1.0f), MANTISSA_PROBE_FMA);
#undef MANTISSA_PROBE_FMA
}

__attribute__((target("avx512f,avx512bf16"))) float dpbf16_chain(int64_t iters) {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3c00);
#define MANTISSA_PROBE_DP(x) _mm512_dpbf16_ps(x, a, b)
  MANTISSA_PROBE_CHAIN(_mm512_setzero_ps(), MANTISSA_PROBE_DP);
#undef MANTISSA_PROBE_DP
}
#undef MANTISSA_PROBE_CHAIN

}  // namespace

double register_peak_gflops(RegisterOp op, int64_t iters) {
  // The hardware's peak: the detected instruction set, not the capped one.
  if (cpu::detected_isa() < cpu::Isa::avx512) return 0;
  if (op == RegisterOp::dpbf16 && cpu::detected_isa() < cpu::Isa::avx512_bf16) return 0;
  static volatile float sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  sink = sink + (op == RegisterOp::dpbf16 ? dpbf16_chain(iters) : fma_chain(iters));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // fp32 lanes per instruction x flops per lane (FMA 2; vdpbf16ps two multiply-adds, 4).
  const double flops = (op == RegisterOp::dpbf16 ? 4.0 : 2.0) * 16.0 * kAcc * static_cast<double>(iters);
  return s > 0 ? flops / s * 1e-9 : 0;
}

}  // namespace mantissa::kernels
