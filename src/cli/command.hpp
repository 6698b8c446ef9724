// Subcommand registry: each cmd_*.cpp adds its subcommand to the CLI11 app
// through a static Registrar, so commands live in their own files.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace mantissa::cli {

// Exit code for bad input (unknown flag, bad value, unreadable file).
inline constexpr int kUsageError = 2;

// Thrown by commands for bad input; main prints "mantissa: <message>" and
// exits with kUsageError.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A CLI11 check that the text is a whole integer within T's range (CLI11
// would otherwise clamp 2^63 or wrap -1 into an unsigned option).
template <typename T>
CLI::Validator exact_integer() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        T v{};
        const char* b = s.data();
        const char* e = b + s.size();
        if (b != e && *b == '+') ++b;
        if (std::numeric_limits<T>::min() == 0 && b != e && *b == '-' && s.find_first_not_of("-0") != std::string::npos)
          return "'" + s.substr(0, 40) + "' is out of range (0 to " + std::to_string(std::numeric_limits<T>::max()) + ")";
        const auto [ptr, ec] = std::from_chars(b, e, v);
        if (ec == std::errc::result_out_of_range)
          return "'" + s.substr(0, 40) + "' is out of range (" + std::to_string(std::numeric_limits<T>::min()) +
                 " to " + std::to_string(std::numeric_limits<T>::max()) + ")";
        if (ec != std::errc() || ptr != e) return "'" + s.substr(0, 40) + "' is not an integer";
        return {};
      },
      "INT");
}

// A CLI11 check that the text is a finite number > 0 (CLI::PositiveNumber's
// message would print the upper end of double's range in 300 digits).
inline CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) return "'" + s.substr(0, 40) + "' is not a finite number";
        if (!(v > 0)) return "must be > 0 (got " + s.substr(0, 40) + ")";
        return {};
      },
      "POSITIVE");
}

using Setup = std::function<void(CLI::App& app)>;
struct Registrar {
  Registrar(int order, Setup setup);
};
std::vector<std::pair<int, Setup>>& registry();

}  // namespace mantissa::cli
