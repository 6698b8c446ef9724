// The 16-point transform on the calling thread (formats/hadamard16.hpp), for
// the FP4 cast that rotates one band of rows at a time in its own threads.
#pragma once

#include <cstdint>

namespace mantissa::formats::detail {

// As hadamard16, without threads; axis 1 or 2 (not checked).
void hadamard16_serial(const float* in, float* out, int64_t rows, int64_t cols, int axis, const float* signs);
// The largest |value| of hadamard16(in) over rows [0, rows) (at most 16, a
// whole group along rows or a shorter last one), rotated in registers and not
// stored; nonfinite: any of them inf or NaN.
float hadamard16_amax(const float* in, int64_t rows, int64_t cols, int axis, const float* signs, bool* nonfinite);

}  // namespace mantissa::formats::detail
