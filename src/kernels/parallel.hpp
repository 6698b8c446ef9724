// Thresholds below which kernels stay single-threaded: waking the OpenMP team
// costs a few microseconds, more than small loops take.
#pragma once

#include <omp.h>

#include <cstdint>

namespace mantissa::kernels {

inline constexpr int64_t kParallelElements = int64_t{1} << 15;  // elementwise loops

// Row kernels: parallel when the whole call touches enough elements.
inline bool parallel_rows(int64_t rows, int64_t cols) {
  return rows > 1 && rows * cols >= kParallelElements;
}

// f(begin, end) over contiguous per-thread chunks of [0, n).
template <class F>
void for_chunks(int64_t n, F&& f) {
  if (n < kParallelElements) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    f(n * t / nt, n * (t + 1) / nt);
  }
}

}  // namespace mantissa::kernels
