// The 16-point Hadamard transform the FP4 casts can apply before rounding
// (Fp4Spec::rht_signs; quant/hadamard.hpp explains why): every group of 16
// values along one axis of x [rows, cols] is replaced by Q g with Q = H D / 4,
// H the 16 x 16 Sylvester-Hadamard matrix, D = diag(signs). Computed as the
// signs, four butterfly stages (a + b, a - b at distances 1, 2, 4, 8), then
// x 1/4 (exact), in that order on every path, so the AVX-512 and scalar
// versions give the same bits.
#pragma once

#include <cstdint>

namespace mantissa::formats {

// axis 1: groups of 16 consecutive rows, per column; axis 2: groups of 16
// consecutive values within each row. A last group shorter than 16 is copied
// unchanged (the identity is orthogonal too). in == out allowed; OpenMP over
// groups. Throws std::invalid_argument for another axis.
void hadamard16(const float* in, float* out, int64_t rows, int64_t cols, int axis, const float* signs);

}  // namespace mantissa::formats
