// The plain values of recipe settings (numbers, true/false), parsed with the
// messages `--set` and recipe files show: "recipe setting KEY: 'V' is not ...".
#pragma once

#include <string_view>

namespace mantissa::recipe {

// A finite number making up the whole of `value`; else std::invalid_argument.
double parse_number(std::string_view key, std::string_view value);
// "true" or "false"; else std::invalid_argument.
bool parse_bool(std::string_view key, std::string_view value);

}  // namespace mantissa::recipe
