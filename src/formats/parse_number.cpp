#include "mantissa/formats/parse_number.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace mantissa::formats {

std::string_view trim_blanks(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

bool parse_number(std::string_view text, double& out) {
  if (text.empty()) return false;
  const std::string s(text);  // strtod needs a terminator
  errno = 0;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return false;
  return !(errno == ERANGE && std::isinf(out));
}

bool parse_finite(std::string_view text, double& out) { return parse_number(text, out) && std::isfinite(out); }

}  // namespace mantissa::formats
