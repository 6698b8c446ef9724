// Pieces the FP4 reference, vector casts and decode share (defined in
// fp4_cast.cpp): argument checks, the non-finite pass-through, nibble packing,
// the implementation chosen, and the counter-based draws (inline).
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
// The implementation fp4_cast, fp4_decode and the element pieces run under
// the active instruction set: "avx512:fp4", "avx2:fp4" or "scalar:fp4".
const char* fp4_implementation();

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
