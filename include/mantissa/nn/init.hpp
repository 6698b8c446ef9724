// Deterministic parameter initialisation. The generator is std::mt19937_64
// (its output sequence is fixed by the C++ standard) and the normal variates
// come from our own Box-Muller transform, so weights depend only on the seed,
// not on the standard library's distribution implementations.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "mantissa/nn/module.hpp"

namespace mantissa::nn {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t next() { return engine_(); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Standard normal; Box-Muller pairs, the second value of a pair is used next.
  double normal();

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// value ~ N(0, stddev^2) element by element in row-major order.
void init_normal(Tensor& value, Rng& rng, double stddev);

}  // namespace mantissa::nn
