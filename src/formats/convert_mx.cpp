// Vectorised MX block quantisation: per block, amax and the non-finite check
// in integer arithmetic on the fp32 bits, the shared E8M0 scale by the same
// rule as mx.cpp, then the elements through the exact integer rounder with
// the scale folded into the exponent (no rounding of x * 2^-s in between).
#include "formats/convert_mx.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "formats/convert_avx512_round.hpp"
#include "formats/convert_avx512_small.hpp"
#include "formats/convert_plan.hpp"
#include "mantissa/formats/convert.hpp"

namespace mantissa::formats::detail {

namespace {

constexpr int kScaleBias = 127;
constexpr uint8_t kNanScale = 0xff;

// The shared-scale rule of mx.cpp (OCP floor, or the ceil option), clipped
// to E8M0's range; amax is finite and > 0.
int scale_exponent(const MxConfig& cfg, double amax) {
  int e2 = 0;
  (void)std::frexp(amax, &e2);
  int s = (e2 - 1) - cfg.element.max_exponent();
  if (cfg.scale_rounding == ScaleRounding::ceil) {
    const double max = cfg.element.max();
    while (amax > std::ldexp(max, s)) ++s;
    while (amax <= std::ldexp(max, s - 1)) --s;
  }
  return std::clamp(s, -kScaleBias, kScaleBias);
}

// floor(log2 |x|) of a positive finite fp32 given by its bits: the
// integer form of scale_exponent's frexp for the OCP floor rule.
int floor_log2(uint32_t bits) {
  if (bits >= 0x800000u) return static_cast<int>(bits >> 23) - 127;
  return (31 - __builtin_clz(bits)) - 149;  // subnormal: bits x 2^-149
}

// 2^k for k in fp32's normal exponent range, built from the bits.
float pow2(int k) { return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23); }

MANTISSA_AVX512 void mx_blocks(const MxConfig& cfg, const QuantPlan& p, const float* in, size_t n, uint8_t* codes,
                               uint8_t* scales, size_t first_block, size_t last_block) {
  const size_t block = static_cast<size_t>(cfg.block);
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const bool small = small_route(p);
  const bool floor_rule = cfg.scale_rounding == ScaleRounding::floor;
  const int element_emax = cfg.element.max_exponent();
  for (size_t b = first_block; b < last_block; ++b) {
    const size_t begin = b * block, end = std::min(n, begin + block);
    __m512i amax = _mm512_setzero_si512();
    for (size_t i = begin; i < end; i += 16) {
      const __mmask16 m = end - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (end - i)) - 1);
      amax = _mm512_max_epu32(amax, _mm512_and_si512(_mm512_maskz_loadu_epi32(m, in + i), abs_mask));
    }
    // |x| bit patterns order like the values; >= inf's pattern is inf or NaN.
    const uint32_t amax_bits = _mm512_reduce_max_epu32(amax);
    if (amax_bits >= 0x7F800000u) {
      scales[b] = kNanScale;
      std::fill(codes + begin * static_cast<size_t>(p.bytes), codes + end * static_cast<size_t>(p.bytes), 0);
      continue;
    }
    float amax_f = 0;
    std::memcpy(&amax_f, &amax_bits, sizeof amax_f);
    const int s = amax_bits == 0 ? -kScaleBias
                  : floor_rule  ? std::clamp(floor_log2(amax_bits) - element_emax, -kScaleBias, kScaleBias)
                                : scale_exponent(cfg, static_cast<double>(amax_f));
    scales[b] = static_cast<uint8_t>(s + kScaleBias);
    if (small) {  // FP8/FP6/FP4 elements: 32 at a time through vcvtps2ph, the scale in the multiply
      const int k = small_route_shift(p) - s;
      const int k1 = k / 2;
      const bool split = k < -126 || k > 127;
      const __m512 f1 = _mm512_set1_ps(pow2(split ? k1 : k));
      const __m512 f2 = _mm512_set1_ps(pow2(split ? k - k1 : 0));
      for (size_t i = begin; i < end; i += 32) {
        const size_t left = std::min<size_t>(32, end - i);
        const __mmask16 mlo = left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
        const __mmask16 mhi = left > 16 ? static_cast<__mmask16>((1u << (left - 16)) - 1) : __mmask16{0};
        const __m512i c = round32_small(p, _mm512_maskz_loadu_ps(mlo, in + i), _mm512_maskz_loadu_ps(mhi, in + i + 16),
                                        f1, f2);
        _mm256_mask_storeu_epi8(codes + i, static_cast<__mmask32>(mlo) | (static_cast<__mmask32>(mhi) << 16),
                                _mm512_cvtepi16_epi8(c));
      }
      continue;
    }
    for (size_t i = begin; i < end; i += 16) {
      const __mmask16 m = end - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (end - i)) - 1);
      const __m512i x = _mm512_maskz_loadu_epi32(m, in + i);
      const __m512i random =
          p.opt.mode == Round::stochastic ? stochastic_draws16(p.opt.seed, i, p.opt.random_bits) : _mm512_setzero_si512();
      store_codes(p.bytes, codes, i, round16<true>(p, x, random, -s), m);
    }
  }
}

}  // namespace

bool mx_quantize_fast(const MxConfig& cfg, const float* in, size_t n, uint8_t* codes, uint8_t* scales) {
  if (active_isa() < Isa::avx512 || cfg.block < 1) return false;
  const QuantPlan p = make_plan(cfg.element, cfg.round);
  if (p.shape == Shape::scalar_only || p.bytes > 2) return false;
  const size_t block = static_cast<size_t>(cfg.block);
  const size_t blocks = (n + block - 1) / block;
  if (n < kParallelThreshold || omp_get_max_threads() == 1) {
    mx_blocks(cfg, p, in, n, codes, scales, 0, blocks);
    return true;
  }
#pragma omp parallel
  {
    const size_t threads = static_cast<size_t>(omp_get_num_threads());
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t per = (blocks + threads - 1) / threads;
    const size_t b0 = std::min(blocks, t * per), b1 = std::min(blocks, b0 + per);
    if (b0 < b1) mx_blocks(cfg, p, in, n, codes, scales, b0, b1);
  }
  return true;
}

}  // namespace mantissa::formats::detail
