// The message of the std::invalid_argument a call throws, or "(accepted)"
// when it throws none: tests compare what a refusal says.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

namespace test_util {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace test_util
