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
//
// Sharded optimizer state (ZeRO stage 1): reduce_scatter() stops after step 3
// (the owner decodes its encoded sum itself: the bytes step 4 would send), so
// each rank holds the reduced gradient of its chunk only, updates it, and
// gather_values() all-gathers the new weights in fp32. The sharded layout
// cuts parameters only at optimizer chunk boundaries (optim::kSpanElems),
// padding the end of a rank's chunk instead, so every rank owns whole chunks
// and the chunks' gradient sums of squares add up to the one-process norm.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mantissa/dist/group.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/optim/owned.hpp"

namespace mantissa::dist {

enum class WireFormat { fp32, bf16, e4m3, e5m2 };

struct CommOptions {
  std::string format = "fp32";  // fp32 | bf16 | fp8 (= fp8-e4m3) | fp8-e4m3 | fp8-e5m2
  int64_t block = 128;          // values per fp8 scale
  bool error_feedback = false;
};

// Throws std::invalid_argument naming the flag.
WireFormat parse_wire_format(const std::string& name);
const char* wire_format_name(WireFormat f);  // "fp32", "bf16", "fp8-e4m3", "fp8-e5m2"
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

// Sum over ranks of `mine` (each rank's values in order, rank after rank,
// from 0), the same on every rank.
double ordered_sum(Group& group, const std::vector<double>& mine, const char* what);

// This rank's elements of each parameter in the sharded layout, as
// GradReducer(..., sharded = true) will own them: known before anything is
// allocated, so the optimizer can be built with its share of the state only.
optim::OwnedRanges shard_ranges(const Group& group, const std::vector<autograd::Parameter*>& params, const CommOptions& o);

class GradReducer {
 public:
  // sharded: the ZeRO stage 1 layout (see above) for reduce_scatter().
  GradReducer(Group& group, std::vector<autograd::Parameter*> params, const CommOptions& o, bool sharded = false);

  // Replaces every rank's Parameter::grad by the ordered sum over ranks.
  // loss_scale: the scale the gradients carry (residuals follow it).
  CommStats reduce(double loss_scale);
  // Sharded: the same sum, written into the gradients of this rank's owned
  // elements only (the other elements keep this rank's own gradient).
  CommStats reduce_scatter(double loss_scale);
  // Sharded: every rank's owned elements of every Parameter::value to all
  // ranks (fp32, exact).
  CommStats gather_values();
  // All-gather of per-parameter state: rank r gives mine[i] (the owned
  // elements of parameter i, owned()[i].size() values) and every rank
  // receives whole[i] (numel values) for every i; a null pointer (the same
  // on every rank) leaves parameter i out.
  void gather(const std::vector<const float*>& mine, const std::vector<float*>& whole, const char* what);
  // Forgets the residuals (after a skipped step: they hold inf/NaN).
  void reset_feedback();

  // This rank's elements of each parameter (whole chunks in the sharded layout).
  const optim::OwnedRanges& owned() const { return owned_; }
  bool sharded() const { return sharded_; }
  int64_t padded_size() const { return chunk_ * group_.size(); }
  int64_t chunk() const { return chunk_; }
  const CommOptions& options() const { return options_; }
  // Error-feedback state for checkpoints (empty without feedback): this
  // rank's residual of its whole vector [padded_size()], its owner residual
  // [chunk()], and the loss scale they are in units of (0: none yet).
  std::vector<float>& residual() { return residual_; }
  std::vector<float>& owner_residual() { return owner_residual_; }
  double residual_scale() const { return residual_scale_; }
  void set_residual_scale(double s) { residual_scale_ = s; }

  // A run of one parameter's elements [begin, end) at flat position `at`.
  struct Piece {
    size_t param;
    int64_t begin, end, at;
  };
  struct Layout {
    std::vector<Piece> pieces;
    int64_t chunk = 0;
    optim::OwnedRanges owned;  // of `rank`
  };
  static Layout plan(const std::vector<autograd::Parameter*>& params, int ranks, int rank, int64_t unit, bool sharded);

 private:
  void flatten_grads();
  // Steps 1-3 and the encoding of the owned sum into send_ (first chunk).
  void sum_owned_chunk(double loss_scale);
  // out = encode(in + residual); residual = that value - decode(out)
  // (residual null: no feedback).
  void encode_with_feedback(const float* in, float* residual, uint8_t* out, int64_t n);

  Group& group_;
  std::vector<autograd::Parameter*> params_;
  CommOptions options_;
  bool sharded_;
  std::vector<Piece> pieces_;
  optim::OwnedRanges owned_;
  WireCodec codec_;
  int64_t total_ = 0, chunk_ = 0;
  size_t chunk_bytes_ = 0;
  std::vector<float> flat_, work_, sum_, part_, residual_, owner_residual_;
  std::vector<uint8_t> send_, recv_;
  double residual_scale_ = 0;
};

}  // namespace mantissa::dist
