// The FP4 casts' AVX2 pieces (fp4_cast_avx2.cpp), the bits of the AVX-512
// ones in fp4_cast.cpp and of the scalar reference: each band of tile rows
// goes through its column maxima, the tiles' scales and the rounding of its
// rows (no register paths for row and column tiles: they take the band
// route, which gives the same bits).
#pragma once

#include <cstdint>

#include "formats/fp4_internal.hpp"

namespace mantissa::formats::detail {

// What a row's cast writes: packed or one-a-byte codes (null: none), decoded
// bf16 (null: none). Shared with the AVX-512 rows of fp4_cast.cpp.
struct RowOut {
  uint8_t* codes;
  bool packed;
  uint16_t* decoded;
};
// One row: y = x / factor (nvfp4) or x (x 3/4) x factor (mxfp4), rounded;
// packed: `codes` is the row's first byte (the row starts at an even element
// and n is even).
using RoundRow = void (*)(bool headroom, DrawKey key, const float* x, const float* factor,
                          const float* block, int64_t n, uint64_t first_index, RowOut out);

}  // namespace mantissa::formats::detail

namespace mantissa::formats::detail::fp4_avx2 {

// Largest |x| (and whether any is inf/NaN) of n floats.
float amax(const float* x, int64_t n, bool* nonfinite);
// Column maxima of |x| over rows [0, r) (cols wide); true if any is inf/NaN.
bool column_max(const float* x, int64_t cols, int64_t r, float* out);
// The scales of n tiles from their maxima (codes may be null).
void block_scales(bool nv, float t, const float* amax, int64_t n, uint8_t* codes, float* factor,
                  float* block);
// The scales of one band's tiles (tc columns wide) from its column maxima:
// codes[across] (null: not kept) and, per column, its tile's factor and
// block scale.
void band_scales(bool nv, float t, int64_t tc, const float* colmax, int64_t cols, uint8_t* codes,
                 float* factor, float* block);
RoundRow round_row_for(bool nv, bool stochastic);
// Row i of the decode from per-column block scales (packed rows start on a byte).
void decode_row(const uint8_t* codes, bool packed, const float* block, int64_t i, int64_t cols,
                uint16_t* out);

}  // namespace mantissa::formats::detail::fp4_avx2
