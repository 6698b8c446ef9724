// The data-parallel gradient sum, in a fixed order and an optional
// low-precision wire format.
//
// All parameters' gradients are viewed as one flat fp32 vector, padded to
// ranks x chunk (chunk a multiple of the fp8 block), and rank j owns chunk j:
//
//   1. encode:   every rank encodes its vector (+ its error-feedback residual)
//   2. alltoall: rank j receives every rank's encoding of chunk j
//   3. sum:      rank j decodes them and adds in rank order, in fp32:
//                s = d_0; s += d_1; ...   (what gradient accumulation does)
//   4. encode s, allgather: every rank decodes the same bytes, so all ranks
//                hold bit-identical gradients, whatever the timing.
//
// With fp32 on the wire the result equals one process accumulating the
// ranks' micro-batches in rank order (train::Trainer), bit for bit.
// Wire formats: fp32 (4 bytes a value), bf16 (2), fp8 e4m3 / e5m2 (1, plus
// one signed byte per block holding a power-of-two scale: 2^e x amax of
// the block fits the format's largest value; a block with inf/NaN decodes to
// NaN everywhere, so the step is skipped on every rank).
// Error feedback keeps what encoding dropped (value - decode(encode(value)))
// and adds it to the next step's gradient: per rank for step 1, per owner
// for step 4.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mantissa/dist/group.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/nn/module.hpp"

namespace mantissa::dist {

enum class WireFormat { fp32, bf16, e4m3, e5m2 };

struct CommOptions {
  std::string format = "fp32";  // fp32 | bf16 | fp8 (= fp8-e4m3) | fp8-e4m3 | fp8-e5m2
  int64_t block = 128;          // values per fp8 scale
  bool error_feedback = false;
};

// Throws std::invalid_argument naming the flag.
WireFormat parse_wire_format(const std::string& name);
void validate(const CommOptions& o);

// A block codec for one wire format: n values (a multiple of the block for
// fp8) to bytes and back. encoded_bytes(n) is the wire size.
class WireCodec {
 public:
  WireCodec(WireFormat f, int64_t block);
  size_t encoded_bytes(int64_t n) const;
  void encode(const float* in, uint8_t* out, int64_t n) const;
  void decode(const uint8_t* in, float* out, int64_t n) const;
  WireFormat format() const { return format_; }

 private:
  WireFormat format_;
  int64_t block_;
  formats::Format fp8_;
  formats::Format bf16_;
  mutable std::vector<float> scratch_;  // fp8: the block-scaled copy that is rounded
};

struct CommStats {
  int64_t bytes_sent = 0;  // by this rank in this step (both collectives)
  double seconds = 0;      // encode + collectives + decode
};

// Rows [rank x B/ranks, (rank+1) x B/ranks) of a batch of B rows (GPT inputs
// and targets [B, T], MLP [B, F] and [B]): this rank's part of a global batch.
// Throws std::invalid_argument when B does not split evenly.
nn::Batch rank_rows(const nn::Batch& b, int rank, int ranks);

class GradReducer {
 public:
  GradReducer(Group& group, std::vector<nn::Parameter*> params, const CommOptions& o);

  // Replaces every rank's Parameter::grad by the ordered sum over ranks.
  // loss_scale: the scale the gradients carry (residuals follow it).
  CommStats reduce(double loss_scale);
  // Forgets the residuals (after a skipped step: they hold inf/NaN).
  void reset_feedback();

  int64_t padded_size() const { return chunk_ * group_.size(); }
  int64_t chunk() const { return chunk_; }

 private:
  // out = encode(in + residual); residual = that value - decode(out)
  // (residual null: no feedback).
  void encode_with_feedback(const float* in, float* residual, uint8_t* out, int64_t n);

  Group& group_;
  std::vector<nn::Parameter*> params_;
  CommOptions options_;
  WireCodec codec_;
  int64_t total_ = 0, chunk_ = 0;
  size_t chunk_bytes_ = 0;
  std::vector<float> flat_, work_, residual_, owner_residual_;
  std::vector<uint8_t> send_, recv_;
  double residual_scale_ = 0;
};

}  // namespace mantissa::dist
