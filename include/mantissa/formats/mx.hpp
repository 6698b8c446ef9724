// OCP Microscaling (MX) block formats: blocks of 32 elements share one E8M0
// scale; elements are e4m3fn/e5m2 (MXFP8), e2m3fn/e3m2fn (MXFP6), e2m1fn
// (MXFP4) or int8 (MXINT8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"

namespace mantissa::formats {

enum class ScaleRounding : uint8_t {
  floor,  // OCP: scale exponent = floor(log2(amax)) - emax(element)
  ceil,   // never overflows the element format: ceil(log2(amax / max))
};

struct MxConfig {
  Format element;
  int block = 32;
  ScaleRounding scale_rounding = ScaleRounding::floor;
  RoundOptions round{.mode = Round::nearest_even, .saturate = true};
};
MxConfig mx_preset(const char* name);  // mxfp8_e4m3, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4, mxint8

struct MxArray {
  size_t n = 0;
  std::vector<uint8_t> codes;   // n * element.storage_bytes() (sub-byte codes kept one per byte)
  std::vector<uint8_t> scales;  // ceil(n / block) E8M0 codes
};

// n need not be a multiple of the block size; the last block is shorter.
// An all-zero block gets the scale 2^-127 (code 0x00); a block holding NaN or
// inf gets the NaN scale 0xFF and dequantises to NaN throughout. MXINT8
// element codes are two's complement with 6 fraction bits (value = code / 64).
// Throws std::invalid_argument for a bad config (block < 1, e8m0 elements).
MxArray mx_quantize(const MxConfig& cfg, const float* in, size_t n);
// The same codes and scales written into the caller's buffers (nothing is
// allocated; every byte of both is written, so they need no clearing):
// codes.size() must be n * element.storage_bytes(), scales.size()
// ceil(n / block); otherwise std::invalid_argument naming the buffer.
void mx_quantize_into(const MxConfig& cfg, const float* in, size_t n, std::span<uint8_t> codes,
                      std::span<uint8_t> scales);
void mx_dequantize(const MxConfig& cfg, const MxArray& a, float* out);

}  // namespace mantissa::formats
