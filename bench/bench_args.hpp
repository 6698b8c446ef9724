// Command-line helpers shared by the hand-written benchmark programs
// (bench_train, bench_checkpoint): a usage error exits with code 2 and names
// the program and the flag.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace bench_args {

inline const char*& program() {
  static const char* name = "bench";
  return name;
}

[[noreturn]] inline void usage_error(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program(), message.c_str());
  std::exit(2);
}

inline int64_t positive(const std::string& flag, const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    usage_error(flag + " expects a positive integer, got '" + text + "'");
  }
  if (used != text.size() || v <= 0) usage_error(flag + " expects a positive integer, got '" + text + "'");
  return v;
}

}  // namespace bench_args
