// The rounding module: one mode enum, a scalar reference path (this header)
// and vector paths (convert.hpp) that must agree with it bit for bit.
#pragma once

#include <cstdint>
#include <string_view>

#include "mantissa/formats/format.hpp"

namespace mantissa::formats {

enum class Round : uint8_t {
  nearest_even,  // default, matches ml_dtypes
  nearest_away,
  toward_zero,
  up,    // toward +inf
  down,  // toward -inf
  stochastic,
};
Round parse_round(std::string_view name);  // "nearest-even", ...; throws
const char* round_name(Round r);

struct RoundOptions {
  Round mode = Round::nearest_even;
  // false: overflow gives inf where the format has it, else NaN (ml_dtypes);
  // formats with neither (FP6/FP4, int8) always saturate.
  bool saturate = false;
  bool flush_subnormals = false;  // results below min_normal become +-0
  int random_bits = 16;           // stochastic: bits of randomness compared
  uint64_t seed = 0;              // stochastic: element i uses hash(seed, i)
};

// Stochastic rounding draws element i's random bits from a counter-based hash
// of (seed, i), so results do not depend on threading or vector width.
uint32_t stochastic_bits(uint64_t seed, uint64_t index, int bits);

// Scalar reference: encode one value into a code (low bits of the result;
// tf32 gives the fp32 bit pattern, see Format::packed_shift). Exact: one
// rounding of the fp64/fp32 input, done in integer arithmetic. Policies:
// - overflow: saturate -> +-max; otherwise inf where the format has it, else
//   NaN (ml_dtypes); formats without inf and NaN always saturate; a mode that
//   rounds toward zero for the value's sign gives +-max (IEEE 754);
// - NaN -> the format's NaN (sign kept where codes have a sign); formats
//   without NaN (FP6/FP4, int8) give +0;
// - -0 kept where the format has it (fnuz: +0); e8m0: zero/negative -> NaN
//   (0xFF), positives below 2^-127 -> 2^-127, ties (1.5 * 2^k) round up;
// - int8: integers in [-127, 127], always saturating;
// - stochastic: round up iff (remainder truncated to random_bits bits) +
//   stochastic_bits(seed, index, random_bits) >= 2^random_bits, so P(up) is
//   the remainder's fraction of an ulp (exact when it has <= random_bits bits).
// `index` selects the random draw for stochastic rounding. Throws
// std::invalid_argument for random_bits outside 1..32 in stochastic mode.
uint32_t encode(const Format& f, double x, const RoundOptions& opt = {}, uint64_t index = 0);
uint32_t encode(const Format& f, float x, const RoundOptions& opt = {}, uint64_t index = 0);
// Decode a code to its exact value (every format here fits in a double; for
// formats of <= 24 significant bits the float decode is exact too).
double decode(const Format& f, uint32_t code);
float decode_f32(const Format& f, uint32_t code);
bool is_nan_code(const Format& f, uint32_t code);

}  // namespace mantissa::formats
