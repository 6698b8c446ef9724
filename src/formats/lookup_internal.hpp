// Internal to the byte -> 16-bit lookup (lookup.cpp and its AVX2 path,
// lookup_avx2.cpp): the sign-magnitude analysis of a table, the exponent
// step of a power-of-two fold, and the AVX2 implementation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "mantissa/formats/lookup.hpp"

namespace mantissa::formats::detail {

// A sign-magnitude table: table[c] == table[c & 0x7F] | (c & 0x80) << 8 for
// every code but (at most) 0x80, and every finite nonzero magnitude entry a
// normal bf16 with exponent fields in [emin, emax]. Such a table needs only
// its 128 magnitudes, and a power-of-two fold whose products stay normal is
// an add to the exponent field, giving the bits the fp32 multiply would.
struct SignMagnitude {
  bool ok = false;
  bool neg_zero_special = false;  // code 0x80 breaks the rule (fnuz's NaN)
  bool unsigned_nan = false;  // negative NaN codes decode to the positive NaN (as decode_f32 gives)
  int emin = 255, emax = 0;
};

// The analysis of `table`, kept for the last table seen on this thread
// (callers decode a tensor in many chunks with one table).
const SignMagnitude& analysis_of(const Table16& table);

// fold = 2^k with every product of the table's magnitudes normal: k, else
// nothing (the multiply route).
std::optional<int> exponent_fold(const SignMagnitude& r, float fold);

// lookup16 / lookup16_widen on AVX2 (Out = uint16_t or float).
template <class Out>
void lookup_avx2(const Table16& table, const uint8_t* codes, Out* out, size_t n, const float* fold,
                 size_t group);

}  // namespace mantissa::formats::detail
