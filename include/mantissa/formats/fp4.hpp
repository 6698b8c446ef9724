// FP4 block casts: E2M1 elements (+-{0, 0.5, 1, 1.5, 2, 3, 4, 6}) sharing
// one scale per block, as the 4-bit training recipes use them (OCP MX v1.0,
// NVIDIA's NVFP4):
//
//   NVFP4 (NVIDIA, arXiv 2509.25149):
//     tensor scale  t = max(amax / (6 * 448), 2^-117)       (fp32, per tensor)
//     block scale   s = e4m3_rne(clamp((amax_b / 6) / t, 2^-9, 448))
//     element       q = e2m1(clamp(x / (t * s), -6, 6))
//     value         q x s x t
//   The floor 2^-117 on t keeps t x s a normal fp32 number (tensors with
//   amax below 1.6e-32 only; torchao divides by zero there). The block-scale
//   floor 2^-9 is E4M3's smallest subnormal; torchao's reference clamps at
//   2^-6 instead, so blocks far below the tensor's amax (amax_b < amax / 28672)
//   keep more precision here than there.
//
//   MXFP4 (OCP MX v1.0): block exponent e = clamp(floor(log2 amax_b) - 2,
//     -127, 127) (E8M0 code e + 127; amax_b 0 gives -127);
//     q = e2m1(clamp(x x 2^-e, -6, 6)), value q x 2^e. With `headroom`
//     (Tseng et al., arXiv 2502.20586, for stochastic rounding) the block is
//     first multiplied by 3/4 so that it never clips; the tensor scale is then
//     4/3.
//
// e2m1() rounds to nearest, ties to even, or stochastically: up with
// probability (|y| - lo) / (hi - lo) between the neighbouring E2M1 values,
// decided by comparing that fraction with a 24-bit draw that depends only on
// (seed, element index in the [rows, cols] view): results do not depend on
// threads or vector width. The sign of a code is the sign of x (-0 included).
//
// Blocks are tiles of tile_rows x tile_cols of x viewed [rows, cols] (edge
// tiles shorter): 1 x 16 along a row, 16 x 1 down a column, 16 x 16 for
// weights (a 2-D block quantises a matrix and its transpose to the same
// values). decoded = q x s (or q x 2^e) is exact in bf16 (at most 2 + 4
// significant bits); the tensor scale is left to the GEMM's alpha.
//
// With rht_signs, x is first rotated by the 16-point Hadamard transform
// (formats/hadamard16.hpp) along rows (rht_axis 1: groups of 16 rows, which
// tile_rows must be a multiple of) or along columns (rht_axis 2), and the
// rotated tensor is cast as above. The vector path rotates one band of tile
// rows at a time in cache, reading x twice (tensor amax, band) instead of
// writing and reading a rotated copy; the bits are those of hadamard16
// followed by the cast.
//
// Packed codes hold two per byte: element k of the [rows, cols] view in byte
// k / 2, the low nibble for even k (the last byte's high nibble 0 for odd n).
//
// A tensor holding inf or NaN is not quantised: decoded is x rounded to bf16
// (so the non-finite values survive and the step is skipped downstream),
// codes and scales are 0, tensor scale 1, and `nonfinite` is set.
#pragma once

#include <cstdint>

namespace mantissa::formats {

enum class Fp4Scale : uint8_t { nvfp4, mxfp4 };
enum class Fp4Rounding : uint8_t { nearest_even, stochastic };

struct Fp4Spec {
  Fp4Scale scale = Fp4Scale::nvfp4;
  int64_t tile_rows = 1, tile_cols = 16;  // tile_cols must be 1, 16 or 32
  Fp4Rounding rounding = Fp4Rounding::nearest_even;
  uint64_t seed = 0;       // stochastic draws
  bool headroom = false;   // mxfp4: blocks scaled by 3/4 first
  bool packed = false;     // codes two per byte
  const float* rht_signs = nullptr;  // 16 signs (+-1): rotate first
  int rht_axis = 1;                  // 1 rows, 2 columns
};

struct Fp4Result {
  float tensor_scale = 1.0f;
  bool nonfinite = false;
};

// Tiles of a [rows, cols] view.
inline int64_t fp4_tile_count(const Fp4Spec& s, int64_t rows, int64_t cols) {
  return ((rows + s.tile_rows - 1) / s.tile_rows) * ((cols + s.tile_cols - 1) / s.tile_cols);
}

// ---- the cast (src/formats/fp4_cast.cpp, vector parts in fp4_tiles.cpp, fp4_cast_avx2.cpp) -
// x [rows, cols] row-major. Any output may be null: codes [rows*cols] (one
// E2M1 code per byte, sign in bit 3; packed: [(rows*cols+1)/2]), scales [fp4_tile_count] (E4M3 or E8M0
// codes, tiles row-major), decoded [rows*cols] bf16 bits of q x block scale.
// The AVX-512 or AVX2 path where the CPU has one, else fp4_cast_reference;
// all give the same bits. Throws std::invalid_argument for a bad spec or shape.
Fp4Result fp4_cast(const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, uint8_t* codes,
                   uint8_t* scales, uint16_t* decoded);
bool fp4_vector_available();  // AVX2 or better (under the ISA cap)
// The 24-bit stochastic draw of element `index` (the fraction compared is draw x 2^-24).
uint32_t fp4_draw(uint64_t seed, uint64_t index);
// For tests: fp4_round_elements_reference and fp4_block_scales_reference
// (below) by the vector path, 16 lanes at a time (n any), the same bits.
void fp4_round_elements(Fp4Scale scale, const float* x, const float* factor, int64_t n, Fp4Rounding rounding,
                        uint64_t seed, uint64_t first_index, uint8_t* codes);
void fp4_block_scales(Fp4Scale scale, const float* amax, int64_t n, float t, uint8_t* codes, float* factor,
                      float* block);

// ---- the scalar reference (src/formats/fp4_reference.cpp) ----------------------------------
// Scalar reference, written from the definitions above tile by tile.
Fp4Result fp4_cast_reference(const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, uint8_t* codes,
                             uint8_t* scales, uint16_t* decoded);
// The E2M1 value of a code (sign in bit 3).
float e2m1_value(uint8_t code);
// For tests: one element of the cast, given the factor of its block
// (nvfp4: the divisor t x s; mxfp4: the multiplier 2^-e, after any 3/4).
void fp4_round_elements_reference(Fp4Scale scale, const float* x, const float* factor, int64_t n,
                                  Fp4Rounding rounding, uint64_t seed, uint64_t first_index, uint8_t* codes);
// For tests: the block-scale rule above for n tiles with largest magnitudes
// amax (finite, >= 0) and tensor scale t (nvfp4; unused for mxfp4): scale
// codes, the elements' factor (nvfp4: the divisor t x s; mxfp4: the
// multiplier 2^-e) and the scale s.
void fp4_block_scales_reference(Fp4Scale scale, const float* amax, int64_t n, float t, uint8_t* codes, float* factor,
                                float* block);

// ---- decoding (src/formats/fp4_decode.cpp) -------------------------------------------------
// decoded [rows*cols] = bf16 bits of q x block scale from the codes (packed
// or not, per spec.packed) and block scales of a cast with the same spec:
// the decoded output fp4_cast gave (not for a non-finite tensor's pass-through).
// Any code and scale byte is accepted (E4M3 0x7F/0xFF and E8M0 0xFF decode
// to NaN); AVX-512 or AVX2 where the CPU has one, same bits.
void fp4_decode(const Fp4Spec& spec, const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                uint16_t* decoded);
// The value of a block-scale code: E4M3 (nvfp4) or E8M0 (mxfp4).
float fp4_scale_value(Fp4Scale scale, uint8_t code);

}  // namespace mantissa::formats
