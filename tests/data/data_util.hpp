// Shared by the data tests: the message of the DataError a call throws, and
// an i32 tensor's values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mantissa/data/source.hpp"
#include "mantissa/tensor/tensor.hpp"

namespace data_test {

// What f throws as a DataError, or "(no DataError)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const mantissa::data::DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

inline std::vector<int32_t> ints(const mantissa::Tensor& t) {
  const auto* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

}  // namespace data_test
