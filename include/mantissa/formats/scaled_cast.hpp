// The whole pass of an FP8 cast over an fp32 span (quant/fp8_cast.cpp runs
// it per chunk, row or tile band): each value scaled by a power of two,
// rounded to nearest-even 1-byte codes, the codes' exact bf16 decode
// (optionally with block scales folded in), and the scan of the input that
// the cast's bookkeeping needs. The AVX-512 and AVX2 paths keep every step in
// registers, so the input is read once and only codes and decode are written;
// the scalar path (ISA capped below avx2) is scaled_copy, the reference
// encoder and lookup16 element by element. Both give the same bits: the
// scaled value is the same fp32 product and the rounders agree with
// formats/round.hpp (the bulk converters' tests).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "mantissa/formats/format.hpp"
#include "mantissa/formats/lookup.hpp"
#include "mantissa/formats/scaled_copy.hpp"

namespace mantissa::formats {

namespace detail {
struct CastState;
}

// 2^e for e in [-127, 127], exactly (2^-127 is an fp32 subnormal): the
// power-of-two block scales of MX and blockwise casts.
inline float exp2_block(int e) {
  return std::bit_cast<float>(e >= -126 ? static_cast<uint32_t>(e + 127) << 23 : 0x00400000u);
}

// A block's scale exponent E from its amax given as fp32 bits (the largest
// |x| bit pattern), in integer arithmetic: with amax = 1.f x 2^a (fp32
// subnormals normalised), E = a - offset, plus 1 when round_up and f's 23
// bits exceed max_fraction; clamped to [-127, 127]. An all-zero block gets
// `zero`, a block holding inf/NaN 0. (MX: offset = the element's max
// exponent; "smallest E with amax x 2^-E <= max": offset and max_fraction
// of max, round_up.)
struct BlockRule {
  int offset = 0;
  bool round_up = false;
  uint32_t max_fraction = 0;
  int zero = 0;
  int exponent(uint32_t amax_bits) const {
    if (amax_bits >= 0x7F800000u) return 0;
    if (amax_bits == 0) return zero;
    int a = static_cast<int>(amax_bits >> 23) - 127;
    uint32_t f = amax_bits & 0x7FFFFFu;
    if (amax_bits < 0x800000u) {  // subnormal: amax_bits x 2^-149
      const int h = 31 - std::countl_zero(amax_bits);
      a = h - 149;
      f = (amax_bits << (23 - h)) & 0x7FFFFFu;
    }
    const int e = a - offset + (round_up && f > max_fraction ? 1 : 0);
    return e < -127 ? -127 : e > 127 ? 127 : e;
  }
};

class ScaledCast {
 public:
  // f: a format with 1-byte codes; `decode`: code -> bf16 bits, kept by
  // reference (it must outlive the cast). Throws std::invalid_argument
  // naming a format with wider codes.
  ScaledCast(const Format& f, bool saturate, const Table16& decode);
  ~ScaledCast();
  ScaledCast(const ScaledCast&) = delete;
  ScaledCast& operator=(const ScaledCast&) = delete;

  // For i < n, with g = i / group (group >= 1; mult and fold hold one entry
  // per group):
  //   codes[i]   = encode(f, x[i] * mult[g]) (nearest-even, saturating or not)
  //   decoded[i] = lookup16 of codes[i] folded by fold[g] (unless `decoded`
  //                is null; fold null: not folded)
  // and returns x's totals as scaled_copy(x, -, n, mult, f.max()) would.
  // `codes` may be null when only the decode is wanted (an output gradient,
  // multiplied at once and not kept). Not threaded.
  ScanTotals run(const float* x, size_t n, const float* mult, size_t group, uint8_t* codes, uint16_t* decoded,
                 const float* fold = nullptr) const;
  // Row blocks: x in blocks of `block` >= 2 elements (the last may be
  // shorter), each cast with the scale its own amax calls for: E =
  // rule.exponent(amax bits), exponents[b] = E, then as run() with mult 2^-E
  // and fold 2^E. The vector path takes 16 blocks' amaxes at a time (one max
  // tree) and casts them while they are in L1.
  ScanTotals run_blocks(const float* x, size_t n, size_t block, const BlockRule& rule, int8_t* exponents,
                        uint8_t* codes, uint16_t* decoded) const;

 private:
  std::unique_ptr<detail::CastState> s_;
};

// acc[i] = max(acc[i], |x[i]| as fp32 bits) for i < n: column maxima of a
// band of rows (unsigned order is magnitude order; >= 0x7F800000 means inf
// or NaN). Not threaded.
void column_amax_bits(const float* x, size_t n, uint32_t* acc);

}  // namespace mantissa::formats
