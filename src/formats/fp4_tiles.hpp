// The FP4 vector cast's AVX-512 register paths (fp4_tiles.cpp) for row tiles
// and column tiles, the shapes the recipes' activation and gradient casts use.
#pragma once

#include <cstdint>

#include "mantissa/formats/fp4.hpp"

namespace mantissa::formats::detail {

// The path for a rounding mode (nv: NVFP4, else MXFP4; stochastic or nearest-even).
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

}  // namespace mantissa::formats::detail
