#include "mantissa/io/fault.hpp"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace mantissa::io {

namespace {

struct Plan {
  int error = 0;     // errno to inject, 0: none
  long target = 0;   // which write fails
};

Plan plan_from_env() {
  Plan p;
  const char* env = std::getenv("MANTISSA_FAULT_WRITE");
  if (!env) return p;
  const std::string s = env;
  const auto colon = s.find(':');
  const std::string name = s.substr(0, colon);
  p.error = name == "ENOSPC" ? ENOSPC : name == "EIO" ? EIO : 0;
  p.target = colon == std::string::npos ? 1 : std::strtol(s.c_str() + colon + 1, nullptr, 10);
  return p;
}

}  // namespace

int injected_write_error() {
  static const Plan plan = plan_from_env();
  static std::atomic<long> writes{0};
  if (plan.error == 0) return 0;
  return ++writes == plan.target ? plan.error : 0;
}

}  // namespace mantissa::io
