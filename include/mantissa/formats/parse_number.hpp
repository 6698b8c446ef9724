// Numbers read from text: the values `mantissa quantize` reads, one per line,
// and every numeric setting (recipe fields, unit settings, loss scales,
// sweep rates). One parser, so every setting accepts the same spellings.
#pragma once

#include <string>
#include <string_view>

namespace mantissa::formats {

// The line without leading and trailing blanks (space, tab, CR, LF).
std::string_view trim_blanks(std::string_view s);
// Full-string parse of a decimal or hex float, nan, inf or -inf; false for
// empty text, trailing junk or out-of-range decimals (overflow to infinity;
// underflow to a subnormal is fine).
bool parse_number(std::string_view text, double& out);
// parse_number, and the value is finite (no nan or inf).
bool parse_finite(std::string_view text, double& out);

}  // namespace mantissa::formats
