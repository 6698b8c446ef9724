// Masked-language-model batches from a byte-level corpus (TextCorpus), for
// the BERT encoder (nn/bert.hpp, whose special ids follow the byte vocabulary).
//
// A row of T tokens is [CLS] A [SEP] [PAD]... or, with probability 1/2,
// [CLS] A [SEP] B [SEP] [PAD]...: n text bytes in all, n uniform in
// [max(2, m/4), m] with m = T - 2 or T - 3 (the room the special tokens
// leave), so most rows are padded. A starts at a uniform position; in a
// two-segment row A's length is uniform in [1, n-1] and B, the rest, is the
// text that follows A with probability 1/2, else from a uniform position.
// Masking (BERT): each text byte is chosen with probability 15%; a chosen
// byte's target is the byte itself, and its input becomes [MASK] with
// probability 80%, a uniform random byte with 10%, and stays with 10%. A row
// in which nothing was chosen gets one chosen byte at a uniform text
// position. Targets are -1 everywhere else (specials, padding, unchosen).
// All draws come from std::mt19937_64 in row order (detail::uniform_below and
// 53-bit uniforms), so a seed gives the same batches everywhere.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "mantissa/data/source.hpp"
#include "mantissa/data/text.hpp"

namespace mantissa::data {

// The four special ids after `byte_vocab` ordinary tokens (nn::BertConfig's).
struct MlmTokens {
  int32_t byte_vocab = kByteVocab;
  int32_t cls() const { return byte_vocab; }
  int32_t sep() const { return byte_vocab + 1; }
  int32_t mask() const { return byte_vocab + 2; }
  int32_t pad() const { return byte_vocab + 3; }
};

// Shortest row: [CLS] a [SEP] b [SEP] plus room to vary.
inline constexpr int64_t kMinMlmSeqLen = 8;

// One row into in/targets [T] from text [0, size), size >= T.
void mlm_row(const uint8_t* text, int64_t size, int64_t T, const MlmTokens& tok, std::mt19937_64& rng, int32_t* in,
             int32_t* targets);

// Seeded rows from the training split, batch rows per next().
class MlmBatches final : public TrainSource {
 public:
  // Throws DataError for non-positive batch, seq_len < kMinMlmSeqLen or a too-short corpus.
  MlmBatches(const TextCorpus& corpus, int64_t batch, int64_t seq_len, uint64_t seed, MlmTokens tok = {});
  nn::Batch next() override;
  // {"kind":"mlm_batches","seed":S,"batches":N,"rng":"<engine state>"}
  std::string state_json() const override;
  void load_state(const std::string& json) override;

 private:
  const TextCorpus* corpus_;
  int64_t batch_, seq_len_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  int64_t batches_ = 0;
  MlmTokens tok_;
};

// A fixed held-out set: rows drawn as above from the validation split with a
// fixed seed (the same for every run, whatever its training seed), as many
// rows as the split holds sequences of seq_len (at least one batch), or
// max_batches batches when max_batches > 0. The last batch may hold fewer rows.
class MlmValidation final : public EvalSource {
 public:
  MlmValidation(const TextCorpus& corpus, int64_t batch, int64_t seq_len, int64_t max_batches = 0, MlmTokens tok = {});
  int64_t num_batches() const override { return static_cast<int64_t>(batches_.size()); }
  nn::Batch batch(int64_t index) const override;

 private:
  std::vector<nn::Batch> batches_;
};

}  // namespace mantissa::data
