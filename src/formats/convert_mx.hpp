// Internal: the vectorised MX block quantiser (convert_mx.cpp), meant to be
// called first by mx_quantize (mx.cpp), which keeps the scalar path for
// everything this kernel declines.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mantissa/formats/mx.hpp"

namespace mantissa::formats::detail {

// Fills codes (n * element bytes) and scales (ceil(n / block)) exactly as the
// scalar mx_quantize does, using AVX-512 or AVX2 and OpenMP above kParallelThreshold.
// Returns false, writing nothing, when this CPU (or the ISA cap) lacks
// AVX2 or the element format is not a float the vector rounder covers
// (int8 elements).
bool mx_quantize_fast(const MxConfig& cfg, const float* in, size_t n, uint8_t* codes, uint8_t* scales);

}  // namespace mantissa::formats::detail
