// Register-level arithmetic peaks of this CPU over all OpenMP threads, for
// the benchmark's fraction of the physical limit: every thread runs the
// library's register probe (kernels::register_peak_gflops: fp32 FMA or
// vdpbf16ps chains on registers, no memory traffic) at once.
#pragma once

#include <omp.h>

#include <algorithm>

#include "mantissa/kernels/matmul_route.hpp"

namespace bench_peak {

// GFLOP/s summed over the team; the best of `tries` (other processes on a
// shared machine only slow a run down). 0 when the CPU lacks the instruction.
inline double probe(bool bf16, int tries = 5) {
  using mantissa::kernels::RegisterOp;
  double best = 0;
  for (int t = 0; t < tries; ++t) {
    double sum = 0;
#pragma omp parallel reduction(+ : sum)
    sum += mantissa::kernels::register_peak_gflops(bf16 ? RegisterOp::dpbf16 : RegisterOp::fma_f32, int64_t{1} << 20);
    best = std::max(best, sum);
  }
  return best;
}

}  // namespace bench_peak
