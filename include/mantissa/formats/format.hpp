// Number-format descriptors: what a code means, independent of how values are
// rounded into it (see round.hpp) or packed in bulk (see convert.hpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace mantissa::formats {

// How a format spends codes on NaN. The e4m3fn family gives up only the
// all-ones code per sign, so its max is 448 and not 480 (OCP 8-bit
// floating point specification, OFP8).
enum class NanEncoding : uint8_t {
  ieee,  // exponent all ones, mantissa non-zero (needs has_inf or not)
  fn,    // only S.1111.111 (all exponent and mantissa bits set) is NaN
  fnuz,  // only the code 0x80 (sign set, rest zero) is NaN; no -0
  none,  // no NaN codes at all (FP6/FP4 and int8)
};

enum class Kind : uint8_t {
  floating,  // sign / exponent / mantissa
  integer,   // two's complement (int8), symmetric range [-127, 127]
  exponent,  // unsigned power of two only (e8m0, the MX block scale)
};

struct Format {
  std::string name;
  Kind kind = Kind::floating;
  int exponent_bits = 0;
  int mantissa_bits = 0;
  int bias = 0;
  bool has_inf = false;
  NanEncoding nan = NanEncoding::none;
  bool negative_zero = true;
  bool subnormals = true;
  bool is_signed = true;

  // Derived properties.
  int total_bits() const;       // sign + exponent + mantissa (int8: 8, e8m0: 8)
  int storage_bytes() const;    // 1, 2 or 4 bytes per packed code
  // Formats wider than 16 bits are stored in an fp32-like 32-bit word with
  // the code in the high bits: tf32 codes are fp32 bit patterns whose low 13
  // bits are zero. 0 for every format of <= 16 bits (codes in the low bits).
  int packed_shift() const;
  uint64_t code_count() const;  // 2^total_bits
  int max_exponent() const;     // unbiased exponent of max finite (int8: 6)
  int min_exponent() const;     // unbiased exponent of min normal (e8m0: -127, int8: 0)
  double max() const;           // largest finite value
  double min_normal() const;
  double min_subnormal() const;  // == min_normal() when !subnormals
  double epsilon() const;        // 2^-mantissa_bits
  const char* nan_name() const;  // "ieee", "fn", "fnuz", "none"
};

// Every preset (int8 is the integer grid [-127, 127]; its code 0x80 decodes
// to -128 but is never produced): fp32, tf32, bf16, fp16, e5m2, e5m2fnuz, e4m3fn, e4m3fnuz, e4m3,
// e4m3b11fnuz, e3m4, e8m0, e2m3fn, e3m2fn, e2m1fn, int8.
std::span<const Format> presets();

// A preset by name, or a user-defined "eXmY" with options after colons:
//   e3m3, e3m3:bias=4, e5m6:inf=0:nan=none:negzero=0:subnormals=0
// User formats default to IEEE rules (bias 2^(X-1)-1, inf, IEEE NaN, -0,
// subnormals); nan=fn|fnuz|none defaults inf to 0, nan=fnuz defaults negzero
// to 0 and bias to 2^(X-1) (as ml_dtypes' fnuz types). 1 <= X <= 11,
// X + Y <= 31. Options after a preset name override that preset's fields.
// Throws std::invalid_argument naming the valid presets on an unknown name,
// and naming the offending option on a bad one.
Format parse_format(std::string_view spec);
const Format& preset(std::string_view name);  // presets only; throws like above
std::string preset_names();                   // "fp32, tf32, ..." for messages

}  // namespace mantissa::formats
