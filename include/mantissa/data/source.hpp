// What the trainer draws batches from: a training stream with resumable state
// and a fixed, deterministic evaluation set.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "mantissa/nn/module.hpp"

namespace mantissa::data {

// Bad data input (missing/empty/malformed file, impossible sizes). Derives
// from std::invalid_argument so the CLI reports it with exit code 2; the
// message names the file (and where in it) or the offending size.
struct DataError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

class TrainSource {
 public:
  virtual ~TrainSource() = default;
  virtual nn::Batch next() = 0;
  // Position and RNG state as a JSON object; load_state(state_json()) makes
  // the following next() calls return exactly what they would have.
  virtual std::string state_json() const = 0;
  virtual void load_state(const std::string& json) = 0;  // throws DataError
};

class EvalSource {
 public:
  virtual ~EvalSource() = default;
  virtual int64_t num_batches() const = 0;
  virtual nn::Batch batch(int64_t index) const = 0;  // same batch every call
  // Whether a target is a token of tokenized data (losses reported in nats
  // and bits per token) rather than a byte of text or an example.
  virtual bool per_token() const { return false; }
};

}  // namespace mantissa::data
