// Internal to the bulk converters and casts: the AVX2 kernels (AVX2 + FMA +
// F16C, cpu::Isa::avx2). Each gives the scalar reference's bits; callers
// choose them from their tables (cpu::select) after the CPU check.
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/convert_plan.hpp"
#include "mantissa/formats/scaled_cast.hpp"

namespace mantissa::formats::detail {

// Bulk conversion (convert_avx2.cpp): the integer rounder (every mode,
// stochastic included), fp16 nearest-even through vcvtps2ph, FP8/FP6/FP4
// through the fp16 route (only where small_route(p)), and the fused fp16
// fake quantisation.
void quantize_avx2_generic(const QuantPlan& p, const float* in, void* codes, size_t n, uint64_t base);
void quantize_avx2_fp16_hw(const QuantPlan& p, const float* in, void* codes, size_t n, uint64_t base);
void quantize_avx2_small(const QuantPlan& p, const float* in, void* codes, size_t n, uint64_t base);
void fake_quantize_avx2_fp16_hw(const QuantPlan& p, const float* in, float* out, size_t n, uint64_t base);
// Decode of codes to fp32 (convert_avx2_decode.cpp).
void dequantize_avx2(const QuantPlan& p, const void* codes, float* out, size_t n);

// The scan + scaled copy of scaled_copy.hpp.
ScanTotals scaled_copy_avx2(const float* x, float* out, size_t n, float mult, float limit);

// How the fused FP8 cast rounds (scaled_cast.cpp): fast, the fp32-arithmetic
// FP8 rounder (convert_avx512_fp8.hpp), falling back to the fp16 route for
// steps it does not cover; small, the fp16 route; generic, the integer
// rounder (formats outside the fp16 route's range).
enum class CastRoute : int { scalar, small, generic, fast };

struct Fp8Rounder;

// What the AVX2 cast pass needs of a ScaledCast (convert_avx2_cast.cpp).
struct Avx2Cast {
  const QuantPlan* plan;
  const Fp8Rounder* fast;
  const Table16* table;
  float limit;
  CastRoute route;
};

// ScaledCast::run and ::run_blocks on AVX2 (route other than scalar).
ScanTotals cast_avx2(const Avx2Cast& c, const float* x, size_t n, const float* mult, size_t group, uint8_t* codes,
                     uint16_t* decoded, const float* fold);
ScanTotals cast_blocks_avx2(const Avx2Cast& c, const float* x, size_t n, size_t block, const BlockRule& rule,
                            int8_t* exponents, uint8_t* codes, uint16_t* decoded);
// column_amax_bits on AVX2.
void column_amax_avx2(const float* x, size_t n, uint32_t* acc);

}  // namespace mantissa::formats::detail
