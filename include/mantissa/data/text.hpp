// Byte-level text corpus (vocabulary 256: every byte is a token, so any UTF-8
// file works), split into a training part and the last 10% for validation.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mantissa/data/source.hpp"
#include "mantissa/data/tokens.hpp"

namespace mantissa::data {

inline constexpr int kByteVocab = 256;
// Largest corpus file read (the whole file is held in memory).
inline constexpr uint64_t kMaxCorpusBytes = uint64_t{1} << 32;

class TextCorpus {
 public:
  // Reads the whole file. Throws DataError naming the path if it is missing,
  // unreadable or empty, or if val_fraction is outside (0, 1).
  static TextCorpus load(const std::string& path, double val_fraction = 0.1);
  // From memory (tests, generated text); `name` appears in errors.
  static TextCorpus from_bytes(std::string bytes, const std::string& name, double val_fraction = 0.1);

  const std::string& path() const { return path_; }
  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  // Training bytes are [0, train_size()), validation [train_size(), size()):
  // train_size = size - floor(size * val_fraction).
  int64_t train_size() const { return train_size_; }
  int64_t val_size() const { return size() - train_size_; }
  const uint8_t* train_bytes() const;
  const uint8_t* val_bytes() const;
  TokenSpan train() const { return {train_bytes(), 1, train_size()}; }
  TokenSpan val() const { return {val_bytes(), 1, val_size()}; }

  // Throws DataError naming the path and sizes unless both splits hold at
  // least one window of seq_len + 1 bytes.
  void check_seq_len(int64_t seq_len) const;

 private:
  std::string path_;
  std::string bytes_;
  int64_t train_size_ = 0;
};

// Seeded random windows of the training split: each batch is B windows of
// T+1 tokens starting at uniform positions in [0, train_size - T - 1] (over
// sharded token data: uniform over every shard's window starts, the shards
// laid end to end, no window spanning two);
// inputs i32 [B, T] = window[0..T), targets i32 [B, T] = window[1..T].
// Positions come from std::mt19937_64(seed) by unbiased rejection sampling
// (not std::uniform_int_distribution, whose output differs across standard
// libraries), so a seed gives the same batches everywhere. The tokens are
// the bytes of a TextCorpus or the ids of a TokenCorpus (same sampler).
class TextWindows final : public TrainSource {
 public:
  // Throws DataError for non-positive batch/seq_len or a too-short corpus.
  TextWindows(const TextCorpus& corpus, int64_t batch, int64_t seq_len, uint64_t seed);
  // Token data, shared with the source; also throws DataError for an id >= vocab.
  TextWindows(std::shared_ptr<const TokenCorpus> corpus, int64_t vocab, int64_t batch, int64_t seq_len, uint64_t seed);
  nn::Batch next() override;
  // {"kind":"text_windows","seed":S,"batches":N,"rng":"<engine state>"};
  // kind "token_windows" over token data, so neither resumes the other.
  std::string state_json() const override;
  void load_state(const std::string& json) override;
  int64_t batches_drawn() const { return batches_; }
  const TokenCorpus* tokens() const { return tokens_.get(); }  // null: byte text

 private:
  TextWindows(std::vector<TokenSpan> train, int64_t batch, int64_t seq_len, uint64_t seed);
  std::vector<TokenSpan> train_;
  std::vector<uint64_t> first_start_;  // index of each shard's first window start, then the total
  std::shared_ptr<const TokenCorpus> tokens_;
  std::string kind_ = "text_windows";
  int64_t batch_, seq_len_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  int64_t batches_ = 0;
};

// Fixed windows covering the validation split: window k starts at k*T, and
// a final window ending at the last token covers the remainder, with the
// already-covered targets set to -1 (ignored); shard after shard for sharded
// token data. Every validation token after
// the first is a target exactly once, so sum(loss) / count is the per-token
// (per-byte) loss of the whole split. Batches hold up to B windows (the last
// may hold fewer). max_batches > 0 keeps only the first max_batches batches.
class TextValidation final : public EvalSource {
 public:
  TextValidation(const TextCorpus& corpus, int64_t batch, int64_t seq_len, int64_t max_batches = 0);
  // Token data; throws DataError for an id >= vocab.
  TextValidation(std::shared_ptr<const TokenCorpus> corpus, int64_t vocab, int64_t batch, int64_t seq_len,
                 int64_t max_batches = 0);
  int64_t num_batches() const override;
  nn::Batch batch(int64_t index) const override;
  bool per_token() const override { return tokens_ != nullptr; }
  int64_t num_windows() const { return static_cast<int64_t>(starts_.size()); }
  int64_t num_targets() const;  // non-ignored targets over all batches

 private:
  TextValidation(std::vector<TokenSpan> val, int64_t batch, int64_t seq_len, int64_t max_batches);
  std::vector<TokenSpan> val_;
  std::shared_ptr<const TokenCorpus> tokens_;
  int64_t batch_, seq_len_;
  std::vector<int64_t> starts_;   // window start in its shard of the validation split
  std::vector<int32_t> shard_;    // that shard
  std::vector<int64_t> skip_;     // leading targets to ignore (a shard's last window)
};

}  // namespace mantissa::data
