// Masked-language-model rows for the BERT encoder (nn/bert.hpp), from a
// byte-level corpus (TextCorpus; the special ids follow the 256 bytes) or a
// token corpus (TokenCorpus, ids of the model's tokenizer, whose special ids
// the model names: mlm_tokens).
//
// A row of T tokens is [CLS] A [SEP] [PAD]... or, with probability 1/2,
// [CLS] A [SEP] B [SEP] [PAD]...: n text ids in all, n uniform in
// [max(2, m/4), m] with m = T - 2 or T - 3 (the room the special tokens
// leave), so most rows are padded. A starts at a uniform position; in a
// two-segment row A's length is uniform in [1, n-1] and B, the rest, is the
// text that follows A with probability 1/2, else from a uniform position.
// Masking (BERT): each text id is chosen with probability 15%; a chosen
// id's target is the id itself, and its input becomes [MASK] with
// probability 80%, a uniform random ordinary id (not one of the four
// special ids) with 10%, and stays with 10%. A row in which nothing was
// chosen gets one chosen id at a uniform text position. Targets are -1
// everywhere else (specials, padding, unchosen). A special id met in the
// text (a tokenizer recognises "[SEP]" written in it) is never chosen; a
// [PAD] there is refused (DataError naming the offset: padding marks the
// end of a row). All draws come from std::mt19937_64 in row order
// (detail::uniform_below and 53-bit uniforms), so a seed gives the same
// batches everywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mantissa/data/source.hpp"
#include "mantissa/data/text.hpp"
#include "mantissa/data/tokens.hpp"

namespace mantissa::data {

// The special ids of the rows and the range random replacements draw from;
// the default is the byte-level layout (nn::BertConfig's): 256 bytes, then
// [CLS], [SEP], [MASK], [PAD].
struct MlmTokens {
  int32_t vocab = kByteVocab + 4;   // ids of the model
  int32_t random_below = kByteVocab;  // replacements: uniform in [0, random_below), the four below skipped
  int32_t cls_id = kByteVocab, sep_id = kByteVocab + 1, mask_id = kByteVocab + 2, pad_id = kByteVocab + 3;
  int32_t cls() const { return cls_id; }
  int32_t sep() const { return sep_id; }
  int32_t mask() const { return mask_id; }
  int32_t pad() const { return pad_id; }
  bool special(int32_t id) const { return id == cls_id || id == sep_id || id == mask_id || id == pad_id; }
};

// The ids a BERT model's rows use. Throws DataError for a model that is not
// a BERT, a byte-level BERT on token data (`token_data`: its ids above 255
// are its special tokens), a BERT of a tokenizer's vocabulary on byte-level
// text, or one whose [CLS], [SEP] or [MASK] id is unknown (its directory
// named none: nn::bert_config_with_special_ids).
MlmTokens mlm_tokens(const nn::Model& model, bool token_data);

// Shortest row: [CLS] a [SEP] b [SEP] plus room to vary.
inline constexpr int64_t kMinMlmSeqLen = 8;

// One row into in/targets [T] from text ids [0, text.size), size >= T.
void mlm_row(const TokenSpan& text, int64_t T, const MlmTokens& tok, std::mt19937_64& rng, int32_t* in,
             int32_t* targets);

// Seeded rows from the training split, batch rows per next().
class MlmBatches final : public TrainSource {
 public:
  // Throws DataError for non-positive batch, seq_len < kMinMlmSeqLen or a too-short corpus.
  MlmBatches(const TextCorpus& corpus, int64_t batch, int64_t seq_len, uint64_t seed, MlmTokens tok = {});
  // Token ids below tok.vocab (checked), the corpus kept alive.
  MlmBatches(std::shared_ptr<const TokenCorpus> corpus, int64_t batch, int64_t seq_len, uint64_t seed, MlmTokens tok);
  nn::Batch next() override;
  // {"kind":"mlm_batches","seed":S,"batches":N,"rng":"<engine state>"}
  std::string state_json() const override;
  void load_state(const std::string& json) override;

 private:
  std::shared_ptr<const TokenCorpus> tokens_;  // token data only
  TokenSpan text_;
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
  MlmValidation(const TokenCorpus& corpus, int64_t batch, int64_t seq_len, int64_t max_batches, MlmTokens tok);
  bool per_token() const override { return per_token_; }
  int64_t num_batches() const override { return static_cast<int64_t>(batches_.size()); }
  nn::Batch batch(int64_t index) const override;

 private:
  MlmValidation(const TokenSpan& text, int64_t batch, int64_t seq_len, int64_t max_batches, const MlmTokens& tok);
  std::vector<nn::Batch> batches_;
  bool per_token_ = false;
};

}  // namespace mantissa::data
