// Thresholds below which kernels stay single-threaded: waking the OpenMP team
// costs a few microseconds, more than small loops take.
#pragma once

#include <cstdint>

namespace mantissa::kernels {

inline constexpr int64_t kParallelElements = int64_t{1} << 15;  // elementwise loops

// Row kernels: parallel when the whole call touches enough elements.
inline bool parallel_rows(int64_t rows, int64_t cols) {
  return rows > 1 && rows * cols >= kParallelElements;
}

}  // namespace mantissa::kernels
