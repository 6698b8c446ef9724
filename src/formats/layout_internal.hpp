// Internal to the formats module: where a format puts its codes. Computed from
// the descriptor so that encode, decode and the MX code share one definition
// of which codes are NaN, inf and the largest finite value.
#pragma once

#include <cstdint>

#include "mantissa/formats/format.hpp"

namespace mantissa::formats::detail {

struct Layout {
  int man_bits = 0;
  int bias = 0;
  int emin = 0;               // unbiased exponent of min normal
  int emax = 0;               // unbiased exponent of max finite
  uint32_t sign_bit = 0;      // 0 for unsigned formats
  uint32_t mag_mask = 0;      // all exponent and mantissa bits
  uint32_t max_mag = 0;       // magnitude code of the largest finite value
  uint32_t top_exp = 0;       // all-ones exponent field
  bool exp_all_ones_special = false;  // IEEE: top exponent holds inf/NaN
};

inline Layout layout_of(const Format& f) {
  Layout l;
  l.man_bits = f.mantissa_bits;
  l.bias = f.bias;
  l.sign_bit = f.is_signed ? uint32_t{1} << (f.exponent_bits + f.mantissa_bits) : 0;
  l.mag_mask = (uint32_t{1} << (f.exponent_bits + f.mantissa_bits)) - 1;
  l.top_exp = (uint32_t{1} << f.exponent_bits) - 1;
  const uint32_t man_all = (uint32_t{1} << f.mantissa_bits) - 1;
  if (f.kind == Kind::integer) {
    l.max_mag = 127;
    l.emin = 0;
    l.emax = 6;
    return l;
  }
  l.exp_all_ones_special = f.has_inf || f.nan == NanEncoding::ieee;
  if (l.exp_all_ones_special) l.max_mag = l.mag_mask - (man_all + 1);
  else if (f.nan == NanEncoding::fn) l.max_mag = l.mag_mask - 1;
  else l.max_mag = l.mag_mask;
  // e8m0 has no zero or subnormals: exponent field 0 is the value 2^-bias.
  l.emin = f.kind == Kind::exponent ? -f.bias : 1 - f.bias;
  l.emax = static_cast<int>(l.max_mag >> f.mantissa_bits) - f.bias;
  return l;
}

}  // namespace mantissa::formats::detail
