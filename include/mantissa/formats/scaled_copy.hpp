// One pass over an fp32 array that a cast needs before rounding: the copy
// scaled by a power of two, and what the cast must know of the input (its
// largest magnitude, whether it holds inf/NaN, how many finite values the
// scaling takes past the format's max). AVX-512, AVX2 and scalar paths agree
// exactly (max and counts are order independent); the ISA cap of
// formats/convert.hpp applies.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mantissa::formats {

struct ScanTotals {
  float amax = 0;         // largest |x|; inf if any value is inf; NaNs are skipped
  bool nonfinite = false; // any value is inf or NaN
  int64_t beyond = 0;     // finite x with |x * mult| > limit
};

// out[i] = x[i] * mult (out may be null: scan only). Not threaded.
ScanTotals scaled_copy(const float* x, float* out, size_t n, float mult, float limit);
// The implementation scaled_copy runs under the active instruction set:
// "avx512:scaled_copy", "avx2:scaled_copy" or "scalar:scaled_copy".
const char* scaled_copy_implementation();

}  // namespace mantissa::formats
