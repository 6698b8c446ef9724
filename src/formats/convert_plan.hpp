// Internal to the bulk converters (convert*.cpp): a conversion "plan" holds
// every constant a kernel needs for one (format, rounding options) pair, so
// the vector kernels do no per-element branching on the descriptor.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"

namespace mantissa::formats::detail {

// Which specialised kernel a plan may use; `generic` is the integer-arithmetic
// sign/exponent/mantissa rounder that covers every floating format with
// E <= 8, M <= 23 and min normal exponent >= -126 (so fp32 subnormals are
// subnormal or below in the target).
enum class Shape : uint8_t { scalar_only, generic, bf16, fp16, fp32 };

struct QuantPlan {
  const Format* format = nullptr;
  RoundOptions opt;
  Shape shape = Shape::scalar_only;
  int bytes = 1;          // storage bytes per code
  int man_bits = 0;       // M
  int emin = 0;           // unbiased exponent of min normal, 1 - bias
  uint32_t sign_bit = 0;  // 1 << (E + M)
  uint32_t max_mag = 0;   // code magnitude of the largest finite value
  uint32_t min_normal_mag = 0;  // 1 << M
  int packed_shift = 0;         // tf32: codes sit in the high bits of a word
  bool negative_zero = true;
  // Codes the scalar reference gives for special inputs, probed once from it
  // so the vector kernels cannot disagree on policy (index 0: +, 1: -).
  uint32_t nan_code[2] = {0, 0};
  uint32_t inf_code[2] = {0, 0};
  uint32_t overflow_code[2] = {0, 0};  // finite input whose rounding exceeds max
  // Write the codes with streaming (non-temporal) stores where the kernel
  // can: set by quantize() for outputs of at least stream_min_bytes().
  bool stream = false;
};

QuantPlan make_plan(const Format& f, const RoundOptions& opt);

// Output size (bytes of codes per call) from which the bulk converters use
// streaming stores: they skip the read for ownership of each destination line
// (a conversion to 2-byte codes then moves 6 bytes per element instead of 8)
// but leave the output in memory rather than in cache. The default, 4 MiB, is
// twice this machine's per-core L2; the L3 of a shared host is not ours to
// count on. MANTISSA_STREAM_MIN_BYTES overrides it (0: always, a huge value:
// never); tests set it to cover the streaming path on small arrays.
size_t stream_min_bytes();
void set_stream_min_bytes(size_t bytes);

// Kernels convert in[0..n) whose first element has global index `base`
// (the stochastic draw of element i depends only on (seed, base + i)).
using QuantKernel = void (*)(const QuantPlan&, const float* in, void* codes, size_t n, uint64_t base);
using DequantKernel = void (*)(const QuantPlan&, const void* codes, float* out, size_t n);

void quantize_scalar(const QuantPlan& p, const float* in, void* codes, size_t n, uint64_t base);
void dequantize_scalar(const QuantPlan& p, const void* codes, float* out, size_t n);

// AVX-512 kernels (convert_avx512.cpp); callers check the CPU first.
// `hw16` allows the AVX512-BF16 instruction for bf16 nearest-even.
void quantize_avx512_generic(const QuantPlan& p, const float* in, void* codes, size_t n, uint64_t base);
void quantize_avx512_bf16_hw(const QuantPlan& p, const float* in, void* codes, size_t n, uint64_t base);
void quantize_avx512_fp16_hw(const QuantPlan& p, const float* in, void* codes, size_t n, uint64_t base);
// Fake quantisation (codes widened back to fp32) in one pass, where the
// quantize kernel of the same name applies.
using FakeKernel = void (*)(const QuantPlan&, const float* in, float* out, size_t n, uint64_t base);
void fake_quantize_avx512_bf16_hw(const QuantPlan& p, const float* in, float* out, size_t n, uint64_t base);
void fake_quantize_avx512_fp16_hw(const QuantPlan& p, const float* in, float* out, size_t n, uint64_t base);
// True when p can take the fp16 route: signed, subnormals, 1-byte codes,
// E <= 5, M <= 8, exponent range fits fp16's, deterministic rounding.
bool small_route(const QuantPlan& p);
// FP8/FP6/FP4 through vcvtps2ph (convert_avx512_small.cpp; only where small_route(p)).
void quantize_avx512_small(const QuantPlan& p, const float* in, void* codes, size_t n, uint64_t base);
void dequantize_avx512(const QuantPlan& p, const void* codes, float* out, size_t n);

}  // namespace mantissa::formats::detail
