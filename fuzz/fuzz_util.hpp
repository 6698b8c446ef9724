// Shared by the libFuzzer targets: a private scratch directory, file writes,
// and the one rule every target checks: bad input may only end in
// std::invalid_argument (the CLI's exit 2). Anything else (a crash, a
// sanitizer report, another exception escaping) is a finding.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace fuzz {

inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("mantissa_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string write(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch() / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Inputs holding several parts separate them with this line.
inline constexpr std::string_view kSeparator = "\n--8<--\n";

inline std::vector<std::string_view> split(std::string_view in) {
  std::vector<std::string_view> parts;
  for (size_t at; (at = in.find(kSeparator)) != std::string_view::npos; in.remove_prefix(at + kSeparator.size()))
    parts.push_back(in.substr(0, at));
  parts.push_back(in);
  return parts;
}

}  // namespace fuzz

// Runs body; std::invalid_argument (FormatError, DataError, ...) is the
// expected refusal of bad input and ends the iteration.
#define FUZZ_EXPECT_REFUSAL(...)            \
  try {                                     \
    __VA_ARGS__;                            \
  } catch (const std::invalid_argument&) {  \
  }
