// The small GPT that analysis and session tests run: 2 blocks of width 64,
// 4 heads, 32 tokens per row, 4 rows per batch.
#pragma once

#include <string>

#include "mantissa/train/session.hpp"

namespace mantissa::train_test {

inline train::TrainConfig small_gpt(const std::string& data, const std::string& recipe) {
  train::TrainConfig c;
  c.model = "gpt";
  c.layers = 2;
  c.d_model = 64;
  c.heads = 4;
  c.seq_len = 32;
  c.batch_size = 4;
  c.recipe = recipe;
  c.data = data;
  return c;
}

}  // namespace mantissa::train_test
