// The scalar reference encoder and decoder. Rounding is done with integer
// arithmetic on the fp64 bit pattern (significand, exponent, remainder bits),
// so no input is ever rounded twice; every vector path must match it bit for
// bit.
//
// Policies beyond ml_dtypes (which knows only nearest-even, non-saturating):
// - Overflow under a rounding mode that moves toward zero for the value's sign
//   (toward-zero, down for positives, up for negatives) gives +-max, as IEEE
//   754 does; other modes give inf, or NaN where the format has no inf.
// - Formats without NaN (FP6/FP4, int8) encode NaN as +0 (code 0). ml_dtypes
//   0.6 gives a zero too, with the sign flipped (0x20 for +NaN in FP6).
// - Formats without inf/NaN always saturate (as ml_dtypes does).
// - e8m0 has no zero: zero, negatives and NaN give the NaN code 0xFF (as
//   ml_dtypes); positive values below 2^-127 give 2^-127 (code 0x00).
//   Ties for M = 0 follow "even significand": the significand of 2^E is 1
//   (odd), so a tie 1.5 * 2^E rounds up, as ml_dtypes and PyTorch do.
#include "mantissa/formats/round.hpp"

#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "formats/layout_internal.hpp"

namespace mantissa::formats {

namespace {

using detail::Layout;

struct Magnitude {
  uint64_t sig;  // |x| = sig * 2^exp, sig != 0
  int exp;
};

Magnitude decompose(double x) {
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  const int field = static_cast<int>((bits >> 52) & 0x7ff);
  const uint64_t frac = bits & ((uint64_t{1} << 52) - 1);
  if (field == 0) return {frac, -1074};
  return {frac | (uint64_t{1} << 52), field - 1075};
}

int bit_length(uint64_t v) { return 64 - std::countl_zero(v); }

// Does this mode, for this sign, round magnitudes toward zero?
bool toward_zero_for(Round mode, bool negative) {
  return mode == Round::toward_zero || (mode == Round::down && !negative) || (mode == Round::up && negative);
}

// sig * 2^exp / 2^quantum rounded to an integer under opt.mode. The caller
// keeps the exact case (exp >= quantum) small enough for 64 bits.
uint64_t round_to_quantum(uint64_t sig, int exp, int quantum, bool negative, const RoundOptions& opt,
                          uint64_t index) {
  if (exp >= quantum) return sig << (exp - quantum);
  const int shift = quantum - exp;
  uint64_t k = 0, rem = sig;
  int cmp_half = -1;  // remainder compared with half a quantum
  if (shift < 64) {
    k = sig >> shift;
    rem = sig & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    cmp_half = rem < half ? -1 : rem == half ? 0 : 1;
  }  // else: sig < 2^53 < half, so the remainder is below half
  if (rem == 0) return k;
  bool up = false;
  switch (opt.mode) {
    case Round::nearest_even: up = cmp_half > 0 || (cmp_half == 0 && (k & 1)); break;
    case Round::nearest_away: up = cmp_half >= 0; break;
    case Round::toward_zero: up = false; break;
    case Round::up: up = !negative; break;
    case Round::down: up = negative; break;
    case Round::stochastic: {
      // Round up with probability frac, frac = rem / 2^shift truncated to R
      // bits: exactly unbiased when the remainder has at most R bits.
      const int r = opt.random_bits;
      uint64_t frac = 0;
      if (shift <= r) frac = rem << (r - shift);
      else if (shift - r < 64) frac = rem >> (shift - r);
      const uint64_t draw = stochastic_bits(opt.seed, index, r);
      up = frac + draw >= (uint64_t{1} << r);
      break;
    }
  }
  return k + (up ? 1 : 0);
}

uint32_t nan_code(const Format& f, const Layout& l, bool negative) {
  switch (f.nan) {
    case NanEncoding::ieee:  // quiet NaN: top mantissa bit (or the whole top exponent if M = 0)
      return (negative ? l.sign_bit : 0) | (l.top_exp << f.mantissa_bits) |
             (f.mantissa_bits > 0 ? uint32_t{1} << (f.mantissa_bits - 1) : 0);
    case NanEncoding::fn: return (negative ? l.sign_bit : 0) | l.mag_mask;
    case NanEncoding::fnuz: return l.sign_bit;
    case NanEncoding::none: return 0;
  }
  return 0;
}

uint32_t zero_code(const Format& f, const Layout& l, bool negative) {
  if (f.kind == Kind::exponent) return 0;  // no zero: the smallest value
  return negative && f.negative_zero ? l.sign_bit : 0;
}

uint32_t overflow_code(const Format& f, const Layout& l, bool negative, const RoundOptions& opt, bool input_inf) {
  const uint32_t sign = negative ? l.sign_bit : 0;
  const bool has_special = f.has_inf || f.nan != NanEncoding::none;
  if (opt.saturate || !has_special || (!input_inf && toward_zero_for(opt.mode, negative))) return sign | l.max_mag;
  if (f.has_inf) return sign | (l.top_exp << f.mantissa_bits);
  return nan_code(f, l, negative);
}

uint32_t encode_integer(double x, const RoundOptions& opt, uint64_t index) {
  if (std::isnan(x)) return 0;
  const bool negative = std::signbit(x);
  uint64_t k = 127;
  if (!std::isinf(x) && x != 0.0) {
    const Magnitude mg = decompose(x);
    if (mg.exp + bit_length(mg.sig) <= 8) k = std::min<uint64_t>(127, round_to_quantum(mg.sig, mg.exp, 0, negative, opt, index));
  } else if (x == 0.0) {
    k = 0;
  }
  const uint32_t mag = static_cast<uint32_t>(k);
  return negative ? (256 - mag) & 0xff : mag;
}

uint32_t encode_floating(const Format& f, double x, const RoundOptions& opt, uint64_t index) {
  const Layout l = detail::layout_of(f);
  const bool negative = std::signbit(x);
  if (std::isnan(x)) return nan_code(f, l, negative);
  if (f.kind == Kind::exponent && (negative || x == 0.0)) return nan_code(f, l, false);
  if (std::isinf(x)) {
    if (f.has_inf && !opt.saturate) return (negative ? l.sign_bit : 0) | (l.top_exp << f.mantissa_bits);
    return overflow_code(f, l, negative, opt, true);
  }
  if (x == 0.0) return zero_code(f, l, negative);
  const int man = f.mantissa_bits;
  const Magnitude mg = decompose(x);
  const int e = mg.exp + bit_length(mg.sig) - 1;  // floor(log2 |x|)
  // Quantum (weight of the last kept bit): normal spacing, or the fixed
  // subnormal spacing, or {0, min normal} when the format has no subnormals.
  const bool below_normal = e < l.emin;
  const int quantum = !below_normal ? e - man : f.subnormals && f.kind == Kind::floating ? l.emin - man : l.emin;
  const uint64_t k = round_to_quantum(mg.sig, mg.exp, quantum, negative, opt, index);
  if (k == 0) return zero_code(f, l, negative);
  const int ev = quantum + bit_length(k) - 1;  // exponent of the rounded value
  const uint32_t sign = negative ? l.sign_bit : 0;
  if (ev > l.emax) return overflow_code(f, l, negative, opt, false);
  if (ev < l.emin) {  // subnormal: quantum is emin - man, so k is the mantissa field
    if (opt.flush_subnormals) return zero_code(f, l, negative);
    return sign | static_cast<uint32_t>(k);
  }
  const int drop = ev - man - quantum;  // > 0 only after a carry, dropping zero bits
  const uint64_t significand = drop >= 0 ? k >> drop : k << -drop;
  const uint32_t mag = (static_cast<uint32_t>(ev + f.bias) << man) |
                       static_cast<uint32_t>(significand - (uint64_t{1} << man));
  if (mag > l.max_mag) return overflow_code(f, l, negative, opt, false);
  return sign | mag;
}

}  // namespace

uint32_t stochastic_bits(uint64_t seed, uint64_t index, int bits) {
  if (bits <= 0) return 0;
  // SplitMix64 finaliser over a seed-dependent counter: a counter-based
  // generator, so element i's draw depends only on (seed, i).
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  const uint64_t h = mix(mix(seed) + (index + 1) * 0x9e3779b97f4a7c15ULL);
  return static_cast<uint32_t>(h >> (64 - std::min(bits, 32)));
}

uint32_t encode(const Format& f, double x, const RoundOptions& opt, uint64_t index) {
  if (opt.mode == Round::stochastic && (opt.random_bits < 1 || opt.random_bits > 32))
    throw std::invalid_argument("stochastic rounding needs 1..32 random bits, got " + std::to_string(opt.random_bits));
  if (f.kind == Kind::integer) return encode_integer(x, opt, index);
  return encode_floating(f, x, opt, index) << f.packed_shift();
}

uint32_t encode(const Format& f, float x, const RoundOptions& opt, uint64_t index) {
  return encode(f, static_cast<double>(x), opt, index);
}

bool is_nan_code(const Format& f, uint32_t code) {
  if (f.kind == Kind::integer) return false;
  const Layout l = detail::layout_of(f);
  const uint32_t c = code >> f.packed_shift();
  const uint32_t mag = c & l.mag_mask;
  switch (f.nan) {
    case NanEncoding::ieee: {
      const uint32_t man_mask = (uint32_t{1} << f.mantissa_bits) - 1;
      return (mag >> f.mantissa_bits) == l.top_exp && (!f.has_inf || (mag & man_mask) != 0);
    }
    case NanEncoding::fn: return mag == l.mag_mask;
    case NanEncoding::fnuz: return (c & (l.sign_bit | l.mag_mask)) == l.sign_bit;
    case NanEncoding::none: return false;
  }
  return false;
}

double decode(const Format& f, uint32_t code) {
  if (f.kind == Kind::integer) return static_cast<double>(static_cast<int8_t>(static_cast<uint8_t>(code)));
  if (is_nan_code(f, code)) return std::numeric_limits<double>::quiet_NaN();
  const Layout l = detail::layout_of(f);
  const uint32_t c = code >> f.packed_shift();
  const bool negative = (c & l.sign_bit) != 0;
  const uint32_t mag = c & l.mag_mask;
  const int man = f.mantissa_bits;
  const uint32_t exp_field = mag >> man;
  const uint32_t man_field = mag & ((uint32_t{1} << man) - 1);
  double v = 0.0;
  if (f.kind == Kind::exponent) {
    v = std::ldexp(1.0, static_cast<int>(exp_field) - f.bias);
  } else if (l.exp_all_ones_special && exp_field == l.top_exp) {
    v = std::numeric_limits<double>::infinity();  // NaN codes were handled above
  } else if (exp_field == 0) {
    // Without subnormals the exponent-0 codes are read as zero (never produced).
    if (f.subnormals) v = std::ldexp(static_cast<double>(man_field), l.emin - man);
    if (v == 0.0 && !f.negative_zero) return 0.0;
  } else {
    v = std::ldexp(static_cast<double>((uint64_t{1} << man) | man_field), static_cast<int>(exp_field) - f.bias - man);
  }
  return negative ? -v : v;
}

float decode_f32(const Format& f, uint32_t code) { return static_cast<float>(decode(f, code)); }

Round parse_round(std::string_view name) {
  for (Round r : {Round::nearest_even, Round::nearest_away, Round::toward_zero, Round::up, Round::down,
                  Round::stochastic})
    if (name == round_name(r)) return r;
  throw std::invalid_argument("unknown rounding mode '" + std::string(name) +
                              "' (valid: nearest-even, nearest-away, toward-zero, up, down, stochastic)");
}

const char* round_name(Round r) {
  switch (r) {
    case Round::nearest_even: return "nearest-even";
    case Round::nearest_away: return "nearest-away";
    case Round::toward_zero: return "toward-zero";
    case Round::up: return "up";
    case Round::down: return "down";
    case Round::stochastic: return "stochastic";
  }
  return "nearest-even";
}

}  // namespace mantissa::formats
