// The 16-point random Hadamard transform (RHT) that 4-bit recipes apply to
// both inputs of the weight-gradient product along its contraction dimension
// (NVIDIA arXiv 2509.25149; Tseng et al. arXiv 2502.20586): with Q = H D,
// H the 16 x 16 Sylvester-Hadamard matrix / 4 (orthonormal, entries +-1/4)
// and D = diag(signs), Q^T Q = I, so (Q x)^T (Q dy) = x^T dy in exact
// arithmetic, while the rotated blocks have no outliers left for the 4-bit
// block scale to clip or for stochastic rounding to amplify. The
// deterministic variant (arXiv 2605.09825) uses D = I.
#pragma once

#include <array>
#include <cstdint>

namespace mantissa::quant {

using RhtSigns = std::array<float, 16>;  // each +1 or -1
// 16 signs drawn from `seed` (a splitmix64 stream); all +1 for deterministic.
RhtSigns rht_signs(uint64_t seed, bool random = true);

// x [rows, cols] row-major: every group of 16 consecutive rows is replaced by
// Q applied to each of its columns (rows 16g .. 16g+15); a last group of
// fewer than 16 rows is left as it is (the identity is orthogonal too).
// In place, O(16 log 16) per column of a group, 16 columns per AVX-512
// vector; the scalar fallback does the same operations in the same order,
// so both give the same bits (formats/hadamard16.hpp).
void rht_rows(float* x, int64_t rows, int64_t cols, const RhtSigns& signs);
// The same from `in` into `out` (in == out allowed): one pass instead of a copy and a transform.
void rht_rows(const float* in, float* out, int64_t rows, int64_t cols, const RhtSigns& signs);
// Along columns: every group of 16 consecutive values within a row (cols
// 16g .. 16g+15) is replaced by Q applied to it; a last shorter group stays.
void rht_cols(const float* in, float* out, int64_t rows, int64_t cols, const RhtSigns& signs);

}  // namespace mantissa::quant
