// Pieces the FP4 reference and vector casts share: argument checks, the
// non-finite pass-through and the counter-based draws.
#pragma once

#include <cstdint>

#include "mantissa/formats/fp4.hpp"

namespace mantissa::formats::detail {

// Throws std::invalid_argument naming the bad field.
void check_fp4_spec(const Fp4Spec& spec, int64_t rows, int64_t cols);
// A tensor holding inf/NaN: decoded = bf16(x) (round to nearest even, NaN
// kept), codes (code_bytes of them) and scales zero.
void fp4_passthrough(const float* x, int64_t n, uint8_t* codes, int64_t code_bytes, uint8_t* scales, int64_t tiles,
                     uint16_t* decoded);
// Codes one per byte -> two per byte (Fp4Spec::packed).
void pack_nibbles(const uint8_t* codes, int64_t n, uint8_t* packed);
// Bytes of the codes output.
inline int64_t fp4_code_bytes(const Fp4Spec& s, int64_t n) { return s.packed ? (n + 1) / 2 : n; }

// The vector cast's register paths (fp4_tiles.cpp), by rounding mode.
// Row tiles (1 x 16, 1 x 32; rotated along columns or not): row i of
// x[., cols] with the tensor scale t; scales = the row's tile scales.
using RowTiles = bool (*)(const Fp4Spec& spec, const float* x, int64_t cols, int64_t i, float t, uint8_t* scales,
                          uint8_t* codes, uint16_t* decoded);
RowTiles row_tiles_for(bool nv, bool stochastic);
// Column tiles (16 x 1, 32 x 1; rotated along rows or not): the band of
// rows [r0, r1) of x[rows, cols]; scales = the band's tile scales. Both
// return true if a value seen is inf/NaN (the outputs are then to be redone).
using ColumnTilesBand = bool (*)(const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, int64_t r0,
                                 int64_t r1, float t, uint8_t* scales, uint8_t* codes, uint16_t* decoded);
ColumnTilesBand column_tiles_band_for(bool nv, bool stochastic);

// The draw of element i: a murmur3 finaliser of the index mixed with a
// per-seed key (two 32-bit halves), so a vector of 16 lanes computes it with
// 32-bit multiplies. 24 bits.
struct DrawKey {
  uint32_t lo, hi;
};
inline uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}
inline DrawKey draw_key(uint64_t seed) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return {static_cast<uint32_t>(z), static_cast<uint32_t>(z >> 32)};
}
inline uint32_t draw_at(DrawKey k, uint64_t i) {
  const uint32_t lo = static_cast<uint32_t>(i), hi = static_cast<uint32_t>(i >> 32);
  return fmix32(((lo + k.lo) * 0x9E3779B1u) ^ (hi * 0x85EBCA77u + k.hi)) >> 8;
}

}  // namespace mantissa::formats::detail
