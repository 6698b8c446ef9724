// Byte -> 16-bit table lookup over arrays: decoding 1-byte codes (FP8) to the
// bits of a 16-bit format (bf16) that holds every code's value exactly. The
// AVX-512 path (one multiply per 16 codes for sign-magnitude float tables,
// four two-register permutes for any other), the AVX2 path (vpshufb over the
// table's byte planes) and the scalar path give identical results; the ISA cap of formats/convert.hpp applies.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace mantissa::formats {

using Table16 = std::array<uint16_t, 256>;

// out[i] = table[codes[i]] for i < n. Not threaded: callers split large
// arrays (it runs at memory speed per thread).
//
// With `fold`, entries are bf16 bits and each is multiplied by
// fold[i / group] (block scales folded into a decode): out[i] is the top 16
// bits of the fp32 product, exact whenever the product is a bf16 value (a
// power-of-two fold that keeps it in bf16's normal range).
void lookup16(const Table16& table, const uint8_t* codes, uint16_t* out, size_t n, const float* fold = nullptr,
              size_t group = 1);

// The same, each result widened to the fp32 of its bf16 bits (what a kernel
// that reads fp32 needs, without a 16-bit pass in between).
void lookup16_widen(const Table16& table, const uint8_t* codes, float* out, size_t n, const float* fold = nullptr,
                    size_t group = 1);

// The implementation lookup16 / lookup16_widen run under the active
// instruction set: "avx512:lookup", "avx2:lookup" or "scalar:lookup".
const char* lookup_implementation();

}  // namespace mantissa::formats
