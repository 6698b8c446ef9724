// Bulk conversion of fp32 arrays: packed codes (1 or 2 bytes per value, or 4
// for fp32) and fake quantisation (round, keep fp32). Kernels are chosen at run
// time from an ordered list by instruction set; all give the scalar
// reference's bits (round.hpp). Large arrays are split across OpenMP threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"

namespace mantissa::formats {

// Name of the kernel the last quantize/dequantize/fake_quantize call on this
// thread ran, "<isa>:<kernel>:<format>[:<rounding>]", e.g.
// "avx512_bf16:cvtneps2bf16:bf16:nearest-even", "avx512:generic:e4m3fn:up",
// "scalar:int8:nearest-even"; every call prints it to stderr when
// MANTISSA_VERBOSE=1. Kernels in order of preference: AVX512-BF16
// vcvtneps2bf16 (bf16, nearest-even, not saturating, not flushing), vcvtps2ph
// (fp16, same conditions), the AVX-512 integer rounder (every floating
// format with <= 8 exponent bits and subnormals: fp32, tf32, bf16, fp16, FP8,
// FP6, FP4 and user eXmY; every mode incl. stochastic), then the scalar
// reference (int8, e8m0, unusual user formats, CPUs without AVX-512).
std::string last_kernel();

// codes must hold n * f.storage_bytes() bytes.
void quantize(const Format& f, const float* in, void* codes, size_t n, const RoundOptions& opt = {});
void dequantize(const Format& f, const void* codes, float* out, size_t n);
// out[i] = decode(encode(in[i])); in == out is allowed.
void fake_quantize(const Format& f, const float* in, float* out, size_t n, const RoundOptions& opt = {});

// Arrays shorter than this run on one thread.
inline constexpr size_t kParallelThreshold = size_t{1} << 16;

}  // namespace mantissa::formats
