// A GPT small enough to train for dozens of steps inside a unit test, and
// next-token rows it learns in that time: from a random start, each token
// follows the last by t -> (13 t + 5) mod 32, plus 0 or 1 at random when
// `noisy` (a task with some irreducible loss).
#pragma once

#include <cstdint>
#include <random>

#include "mantissa/nn/gpt.hpp"

namespace mantissa {

inline nn::GPTConfig tiny_gpt_config(int64_t layers, uint64_t seed) {
  nn::GPTConfig g;
  g.vocab = 32;
  g.context = 16;
  g.layers = layers;
  g.d_model = 32;
  g.heads = 2;
  g.seed = seed;
  return g;
}

// `rows` rows of the context's 16 tokens; draws from `rng` row by row.
inline nn::Batch recurrence_batch(std::mt19937_64& rng, int64_t rows, bool noisy = false) {
  const int64_t T = 16;
  nn::Batch b{Tensor::empty({rows, T}, DType::i32), Tensor::empty({rows, T}, DType::i32)};
  for (int64_t r = 0; r < rows; ++r) {
    int32_t tok = static_cast<int32_t>(rng() % 32);
    for (int64_t t = 0; t < T; ++t) {
      b.inputs.data<int32_t>()[r * T + t] = tok;
      tok = (tok * 13 + 5 + (noisy ? static_cast<int32_t>(rng() % 2) : 0)) % 32;
      b.targets.data<int32_t>()[r * T + t] = tok;
    }
  }
  return b;
}

}  // namespace mantissa
