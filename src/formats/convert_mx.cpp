// Vectorised MX block quantisation: per block, amax and the non-finite check
// in integer arithmetic on the fp32 bits, the shared E8M0 scale by the same
// rule as mx.cpp, then the elements through the exact rounders with the scale
// folded into the exponent (no rounding of x * 2^-s in between).
//
// 32-element blocks go 16 at a time: the 16 amaxes land in the lanes of one
// register (a transposing max tree), and the scale exponents and the
// per-block factors are computed for all 16 in vector registers, so the only
// per-block work left is the element rounding. Other block sizes and the
// blocks left over at the end of a thread's range go one at a time (every
// block, on AVX2, 8 or 16 elements a step). Codes
// of outputs of at least stream_min_bytes() (convert_plan.hpp) go out with
// streaming stores (mx_groups_streamed).
#include "formats/convert_mx.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "formats/convert_avx2_round.hpp"
#include "formats/convert_avx2_small.hpp"
#include "formats/convert_avx512_round.hpp"
#include "formats/convert_avx512_small.hpp"
#include "formats/convert_avx512_tree.hpp"
#include "formats/convert_avx512_util.hpp"
#include "formats/convert_plan.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/cpu/isa.hpp"

namespace mantissa::formats::detail {

namespace {

constexpr int kScaleBias = 127;
constexpr uint8_t kNanScale = 0xff;
constexpr uint32_t kInfBits = 0x7F800000u;
constexpr size_t kGroupBlocks = 16;  // blocks per vector step
constexpr size_t kGroupBlock = 32;   // the block size the vector step handles

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

// The scale exponent of a block with finite amax (given as fp32 bits).
int block_scale(const MxConfig& cfg, uint32_t amax_bits) {
  if (amax_bits == 0) return -kScaleBias;
  if (cfg.scale_rounding == ScaleRounding::floor)
    return std::clamp(floor_log2(amax_bits) - cfg.element.max_exponent(), -kScaleBias, kScaleBias);
  return scale_exponent(cfg, static_cast<double>(std::bit_cast<float>(amax_bits)));
}

// 2^k for k in fp32's normal exponent range, built from the bits.
float pow2(int k) { return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23); }

// scale_exponent in closed form for the vector step. With amax = ma 2^ea and
// the element max = mM 2^E (ma, mM in [1, 2)), the smallest s with
// amax <= max 2^s is ea - E + (ma > mM); the floor rule is ea - emax.
struct ScaleRule {
  int exponent_offset = 0;   // emax (floor) or E (ceil)
  bool ceil = false;
  uint32_t max_mantissa = 0;  // mM's 23 fraction bits (ceil): exact, elements have <= 15 mantissa bits
  int shift = 0;              // small_route_shift, or 0 for the integer rounder
};

ScaleRule make_rule(const MxConfig& cfg, const QuantPlan& p, bool small) {
  ScaleRule r;
  r.ceil = cfg.scale_rounding == ScaleRounding::ceil;
  r.shift = small ? small_route_shift(p) : 0;
  if (!r.ceil) {
    r.exponent_offset = cfg.element.max_exponent();
    return r;
  }
  int e2 = 0;
  const double m = std::frexp(cfg.element.max(), &e2);  // max = m 2^e2, m in [0.5, 1)
  r.exponent_offset = e2 - 1;
  r.max_mantissa = static_cast<uint32_t>(std::ldexp(2 * m - 1, 23));
  return r;
}

// Lane j: the bits of max |x| over in[32j .. 32j + 32), by the max tree of
// convert_avx512_tree.hpp.
MANTISSA_AVX512 inline __m512i amax16_blocks32(const float* in) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  __m512i v[16];
  for (int j = 0; j < 16; ++j) {
    const __m512i lo = _mm512_and_si512(_mm512_loadu_si512(in + 32 * j), abs_mask);
    const __m512i hi = _mm512_and_si512(_mm512_loadu_si512(in + 32 * j + 16), abs_mask);
    v[j] = _mm512_max_epu32(lo, hi);
  }
  return max_across16(v);
}

// Everything a group of 16 blocks needs before its elements are rounded.
struct GroupScales {
  alignas(64) int32_t s[16];   // scale exponents (integer rounder)
  alignas(64) float f1[16];    // 2^(shift - s), or its first half when split
  alignas(64) float f2[16];    // the second half when split, else 1
  __mmask16 special = 0;       // blocks holding inf or NaN
  bool split = false;          // some block needs two factors
};

// Writes the 16 E8M0 scales and fills g, for the amax bits in `amax`.
MANTISSA_AVX512 inline void group_scales(const ScaleRule& r, __m512i amax, uint8_t* scales, GroupScales& g) {
  g.special = _mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(static_cast<int>(kInfBits)));
  const __mmask16 zero = _mm512_testn_epi32_mask(amax, amax);
  // Normalise subnormal amaxes through the int -> float conversion (exact:
  // they are < 2^23); the exponent field then reads 149 too high.
  const __mmask16 normal = _mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(0x800000));
  const __m512i bits = _mm512_mask_mov_epi32(_mm512_castps_si512(_mm512_cvtepi32_ps(amax)), normal, amax);
  const __m512i bias = _mm512_mask_mov_epi32(_mm512_set1_epi32(127 + 149), normal, _mm512_set1_epi32(127));
  __m512i s = _mm512_sub_epi32(_mm512_srli_epi32(bits, 23), _mm512_add_epi32(bias, _mm512_set1_epi32(r.exponent_offset)));
  if (r.ceil) {
    const __mmask16 above = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFF)),
                                                    _mm512_set1_epi32(static_cast<int>(r.max_mantissa)));
    s = _mm512_mask_add_epi32(s, above, s, _mm512_set1_epi32(1));
  }
  s = _mm512_min_epi32(_mm512_max_epi32(s, _mm512_set1_epi32(-kScaleBias)), _mm512_set1_epi32(kScaleBias));
  s = _mm512_mask_mov_epi32(s, zero, _mm512_set1_epi32(-kScaleBias));
  __m512i code = _mm512_add_epi32(s, _mm512_set1_epi32(kScaleBias));
  code = _mm512_mask_mov_epi32(code, g.special, _mm512_set1_epi32(kNanScale));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(scales), _mm512_cvtepi32_epi8(code));
  _mm512_store_si512(g.s, s);
  // 2^k with k = shift - s; outside fp32's normal exponents split as
  // k/2 (truncated) and k - k/2, as the one-block path does.
  const __m512i k = _mm512_sub_epi32(_mm512_set1_epi32(r.shift), s);
  const __mmask16 split = static_cast<__mmask16>(
      ~g.special & (_mm512_cmplt_epi32_mask(k, _mm512_set1_epi32(-126)) |
                    _mm512_cmpgt_epi32_mask(k, _mm512_set1_epi32(127))));
  const __m512i half = _mm512_srai_epi32(_mm512_add_epi32(k, _mm512_srli_epi32(k, 31)), 1);
  const __m512i k1 = _mm512_mask_mov_epi32(k, split, half);
  const __m512i k2 = _mm512_maskz_sub_epi32(split, k, half);
  const __m512i exp_bias = _mm512_set1_epi32(127);
  _mm512_store_ps(g.f1, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, exp_bias), 23)));
  _mm512_store_ps(g.f2, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k2, exp_bias), 23)));
  g.split = split != 0;
}

// The elements of one block of len elements with scale exponent s, the first
// at global index `index` (for the stochastic draws), codes of p.bytes bytes,
// after its scale is known (not for inf/NaN blocks).
MANTISSA_AVX512 inline void block_elements_integer(const QuantPlan& p, const float* in, uint8_t* codes, size_t len,
                                                   size_t index, int s) {
  for (size_t i = 0; i < len; i += 16) {
    const __mmask16 m = tail_mask16(len - i);
    const __m512i x = _mm512_maskz_loadu_epi32(m, in + i);
    const __m512i random = p.opt.mode == Round::stochastic ? stochastic_draws16(p.opt.seed, index + i, p.opt.random_bits)
                                                           : _mm512_setzero_si512();
    store_codes(p.bytes, codes, i, round16<true>(p, x, random, -s), m);
  }
}

// The elements of the 16 blocks of a group through the fp16 route, block j
// multiplied by f1[j] (and f2[j]). Kept out of line with its own copy of the
// plan: in the caller the plan would be spilled and reloaded every block.
template <bool kTwoFactors>
MANTISSA_AVX512 [[gnu::noinline]] void group_elements_small(const QuantPlan& plan, const float* in, uint8_t* codes,
                                                            const GroupScales& g) {
  const QuantPlan p = plan;  // the code stores cannot alias a local
  for (size_t j = 0; j < kGroupBlocks; ++j) {
    const float* x = in + j * kGroupBlock;
    const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
    __m512i c;
    if constexpr (kTwoFactors) {
      c = round32_small(p, lo, hi, _mm512_set1_ps(g.f1[j]), _mm512_set1_ps(g.f2[j]));
    } else {
      c = round32_small(p, lo, hi, _mm512_set1_ps(g.f1[j]));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + j * kGroupBlock), _mm512_cvtepi16_epi8(c));
  }
}

// 16 full 32-element blocks starting at block b; their codes go to
// group_codes (the array at block b, or a staging buffer).
MANTISSA_AVX512 void mx_group16(const ScaleRule& r, const QuantPlan& p, bool small, const float* in, size_t b,
                                uint8_t* group_codes, uint8_t* scales) {
  const size_t first = b * kGroupBlock;
  GroupScales g;
  group_scales(r, amax16_blocks32(in + first), scales + b, g);
  const size_t bytes = static_cast<size_t>(p.bytes);
  if (small) {
    if (g.split) group_elements_small<true>(p, in + first, group_codes, g);
    else group_elements_small<false>(p, in + first, group_codes, g);
  } else {
    for (size_t j = 0; j < kGroupBlocks; ++j) {
      const size_t i = j * kGroupBlock;
      if (((g.special >> j) & 1u) == 0)
        block_elements_integer(p, in + first + i, group_codes + i * bytes, kGroupBlock, first + i, g.s[j]);
    }
  }
  // inf/NaN blocks: codes 0 under the NaN scale (over what the rounder wrote).
  for (unsigned m = g.special; m != 0; m &= m - 1)
    std::memset(group_codes + static_cast<size_t>(__builtin_ctz(m)) * kGroupBlock * bytes, 0, kGroupBlock * bytes);
}

// Groups [b, b_end) (whole groups of 16 blocks, 1-byte codes) with the codes
// written by streaming stores, which need whole aligned 64-byte lines while a
// group's 512 codes may start anywhere in a line: each group is rounded into
// an L1 staging buffer at the destination's offset within its line, the
// buffer's whole lines are streamed out, and the partial line at its end
// carries over to the front of the buffer for the next group. Only the first
// and the last partial line use ordinary (masked) stores.
MANTISSA_AVX512 void mx_groups_streamed(const ScaleRule& r, const QuantPlan& p, const float* in, size_t b,
                                        size_t b_end, uint8_t* codes, uint8_t* scales) {
  constexpr size_t kGroupBytes = kGroupBlocks * kGroupBlock;
  alignas(64) uint8_t stage[kGroupBytes + 64];
  const size_t off = reinterpret_cast<uintptr_t>(codes + b * kGroupBlock) % 64;
  uint8_t* line = codes + b * kGroupBlock - off;  // the line the group's first code falls in
  for (bool first = true; b < b_end; b += kGroupBlocks, line += kGroupBytes, first = false) {
    mx_group16(r, p, true, in, b, stage + off, scales);
    size_t k = 0;
    if (first && off != 0) {  // the line's bytes before off are not this call's to write
      _mm512_mask_storeu_epi8(line, ~uint64_t{0} << off, _mm512_load_si512(stage));
      k = 1;
    }
    for (; k < kGroupBytes / 64; ++k)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(line + 64 * k), _mm512_load_si512(stage + 64 * k));
    _mm512_store_si512(stage, _mm512_load_si512(stage + kGroupBytes));
  }
  if (off != 0) _mm512_mask_storeu_epi8(line, (uint64_t{1} << off) - 1, _mm512_load_si512(stage));
  _mm_sfence();
}

// One block of any size: amax by a horizontal reduction, the scale in scalar.
MANTISSA_AVX512 void mx_one_block(const MxConfig& cfg, const QuantPlan& p, bool small, const float* in, size_t begin,
                                  size_t end, uint8_t* codes, uint8_t* scale) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  __m512i amax = _mm512_setzero_si512();
  for (size_t i = begin; i < end; i += 16)
    amax = _mm512_max_epu32(amax, _mm512_and_si512(_mm512_maskz_loadu_epi32(tail_mask16(end - i), in + i), abs_mask));
  const uint32_t amax_bits = _mm512_reduce_max_epu32(amax);
  if (amax_bits >= kInfBits) {
    *scale = kNanScale;
    std::fill(codes + begin * static_cast<size_t>(p.bytes), codes + end * static_cast<size_t>(p.bytes), 0);
    return;
  }
  const int s = block_scale(cfg, amax_bits);
  *scale = static_cast<uint8_t>(s + kScaleBias);
  if (!small) {
    block_elements_integer(p, in + begin, codes + begin * static_cast<size_t>(p.bytes), end - begin, begin, s);
    return;
  }
  // FP8/FP6/FP4 elements: 32 at a time through vcvtps2ph, the scale in the multiply.
  const int k = small_route_shift(p) - s;
  const int k1 = k / 2;
  const bool split = k < -126 || k > 127;
  const __m512 f1 = _mm512_set1_ps(pow2(split ? k1 : k));
  const __m512 f2 = _mm512_set1_ps(pow2(split ? k - k1 : 0));
  for (size_t i = begin; i < end; i += 32) {
    const TailMask32 m = tail_mask32(end - i);
    const __m512i c =
        round32_small(p, _mm512_maskz_loadu_ps(m.lo, in + i), _mm512_maskz_loadu_ps(m.hi, in + i + 16), f1, f2);
    _mm256_mask_storeu_epi8(codes + i, m.both(), _mm512_cvtepi16_epi8(c));
  }
}

MANTISSA_AVX512 void mx_blocks(const MxConfig& cfg, const QuantPlan& p, const float* in, size_t n, uint8_t* codes,
                               uint8_t* scales, size_t first_block, size_t last_block) {
  const size_t block = static_cast<size_t>(cfg.block);
  const bool small = small_route(p);
  size_t b = first_block;
  if (block == kGroupBlock) {
    const ScaleRule rule = make_rule(cfg, p, small);
    const size_t full_blocks = std::min(last_block, n / kGroupBlock);
    const size_t groups_end = b + (full_blocks > b ? (full_blocks - b) / kGroupBlocks * kGroupBlocks : 0);
    if (p.stream && small && groups_end > b) {
      mx_groups_streamed(rule, p, in, b, groups_end, codes, scales);
      b = groups_end;
    }
    const size_t bytes = static_cast<size_t>(p.bytes);
    for (; b < groups_end; b += kGroupBlocks) mx_group16(rule, p, small, in, b, codes + b * kGroupBlock * bytes, scales);
  }
  for (; b < last_block; ++b)
    mx_one_block(cfg, p, small, in, b * block, std::min(n, b * block + block), codes, scales + b);
}

// AVX2: every block on its own (amax by a horizontal reduction, the scale
// in scalar), its elements 8 (integer rounder) or 16 (fp16 route) at a time,
// the tail of a block from a zero-padded copy.
MANTISSA_AVX2 void mx_one_block_avx2(const MxConfig& cfg, const QuantPlan& p, bool small, const float* in,
                                     size_t begin, size_t end, uint8_t* codes, uint8_t* scale) {
  const size_t bytes = static_cast<size_t>(p.bytes);
  __m256i vmax = _mm256_setzero_si256();
  size_t i = begin;
  for (; i + 8 <= end; i += 8)
    vmax = _mm256_max_epu32(vmax, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)),
                                                   _mm256_set1_epi32(0x7FFFFFFF)));
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), vmax);
  uint32_t amax_bits = 0;
  for (uint32_t v : lanes) amax_bits = std::max(amax_bits, v);
  for (; i < end; ++i) amax_bits = std::max(amax_bits, std::bit_cast<uint32_t>(in[i]) & 0x7FFFFFFFu);
  if (amax_bits >= kInfBits) {
    *scale = kNanScale;
    std::fill(codes + begin * bytes, codes + end * bytes, 0);
    return;
  }
  const int s = block_scale(cfg, amax_bits);
  *scale = static_cast<uint8_t>(s + kScaleBias);
  const size_t step = small ? 16 : 8;
  alignas(32) float pad[16];
  alignas(32) uint8_t res[32];
  for (i = begin; i < end; i += step) {
    const size_t len = std::min(step, end - i);
    const float* x = in + i;
    if (len < step) {
      std::memset(pad, 0, sizeof(pad));
      std::memcpy(pad, x, len * sizeof(float));
      x = pad;
    }
    uint8_t* out = len < step ? res : codes + i * bytes;
    if (small) {
      // FP8/FP6/FP4 elements through vcvtps2ph, the scale in the multiply.
      const int k = small_route_shift(p) - s;
      const bool split = k < -126 || k > 127;
      const __m256 f1 = _mm256_set1_ps(pow2(split ? k / 2 : k)), f2 = _mm256_set1_ps(pow2(split ? k - k / 2 : 0));
      const __m256i c = avx2::round16_small<true>(p, _mm256_loadu_ps(x), _mm256_loadu_ps(x + 8), f1, f2);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), avx2::pack8(c));
    } else {
      const __m256i random = avx2::draws8(p, i);
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
      avx2::store_codes8(p.bytes, out, 0, avx2::round8<true>(p, v, random, -s));
    }
    if (len < step) std::memcpy(codes + i * bytes, res, len * bytes);
  }
}

void mx_blocks_any(const MxConfig& cfg, const QuantPlan& p, const float* in, size_t n, uint8_t* codes,
                   uint8_t* scales, size_t first_block, size_t last_block) {
  if (cpu::active_isa() >= cpu::Isa::avx512) return mx_blocks(cfg, p, in, n, codes, scales, first_block, last_block);
  const size_t block = static_cast<size_t>(cfg.block);
  const bool small = small_route(p);
  for (size_t b = first_block; b < last_block; ++b)
    mx_one_block_avx2(cfg, p, small, in, b * block, std::min(n, b * block + block), codes, scales + b);
}

}  // namespace

bool mx_quantize_fast(const MxConfig& cfg, const float* in, size_t n, uint8_t* codes, uint8_t* scales) {
  if (cpu::active_isa() < cpu::Isa::avx2 || cfg.block < 1) return false;
  QuantPlan p = make_plan(cfg.element, cfg.round);
  if (p.shape == Shape::scalar_only || p.bytes > 2) return false;
  p.stream = n * static_cast<size_t>(p.bytes) >= stream_min_bytes();
  const size_t block = static_cast<size_t>(cfg.block);
  const size_t blocks = (n + block - 1) / block;
  if (n < kParallelThreshold || omp_get_max_threads() == 1) {
    mx_blocks_any(cfg, p, in, n, codes, scales, 0, blocks);
    return true;
  }
#pragma omp parallel
  {
    // Whole groups of 16 blocks per thread, so only the last thread has a tail.
    const size_t threads = static_cast<size_t>(omp_get_num_threads());
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t groups = (blocks + kGroupBlocks - 1) / kGroupBlocks;
    const size_t per = (groups + threads - 1) / threads * kGroupBlocks;
    const size_t b0 = std::min(blocks, t * per), b1 = std::min(blocks, b0 + per);
    if (b0 < b1) mx_blocks_any(cfg, p, in, n, codes, scales, b0, b1);
  }
  return true;
}

}  // namespace mantissa::formats::detail
