// Seeded sampling helpers shared by the data sources: unbiased integers from
// std::mt19937_64 (std::uniform_int_distribution's output differs between
// standard libraries; this does not) and the engine's state as text.
#pragma once

#include <cstdint>
#include <random>
#include <sstream>
#include <string>

#include "mantissa/data/source.hpp"

namespace mantissa::data::detail {

// Uniform in [0, n), n >= 1, by rejection of the top partial block.
inline uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // a multiple of n
  uint64_t x;
  do x = rng();
  while (x >= limit);
  return x % n;
}

inline std::string engine_state(const std::mt19937_64& rng) {
  std::ostringstream o;
  o << rng;
  return o.str();
}

inline void set_engine_state(std::mt19937_64& rng, const std::string& state, const std::string& where) {
  std::istringstream in(state);
  std::mt19937_64 r;
  in >> r;
  if (in.fail()) throw DataError(where + ": RNG state is malformed");
  // An all-zero state is a fixed point of the generator: it draws 0 forever.
  std::istringstream words(state);
  bool zero = true;
  uint64_t w = 0;
  for (size_t i = 0; i < std::mt19937_64::state_size && words >> w; ++i) zero = zero && w == 0;
  if (zero) throw DataError(where + ": RNG state is all zero (the generator would draw only zeros)");
  rng = r;
}

}  // namespace mantissa::data::detail
