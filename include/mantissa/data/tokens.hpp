// Tokenized corpora as the field writes them, memory-mapped read-only and
// never read whole:
//  - llm.c: a header of 256 little-endian int32 (1024 bytes): [0] magic,
//    [1] version, [2] token count; the tokens follow. Magic 20240520 with
//    version 1 holds uint16 ids, magic 20240801 with version 7 uint32 ids.
//  - nanoGPT: headerless little-endian uint16 ids, in train.bin / val.bin.
// A file is llm.c's when its first int32 is one of the two magics; a file
// without one is read as nanoGPT's only under the names train.bin and
// val.bin, any other is refused (bad magic).
//
// Splits: a directory holding train.bin and val.bin, or llm.c's files of
// one PREFIX: PREFIX_train.bin / PREFIX_val.bin, or shards
// PREFIX_train_NNNNNN.bin / PREFIX_val_NNNNNN.bin (as llm.c's data scripts
// write large corpora; NNNNNN any digits, read in name order), uses them as
// the training and validation splits. A single file splits as the byte
// corpus does: the last floor(n x val_fraction) tokens are held out. A
// window never spans two shards.
//
// Every id is scanned once at load (a vectorised max); check_vocab(V)
// refuses an id >= V naming the file and the offset of the first one, so a
// batch never indexes outside the model's embedding table.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mantissa/data/source.hpp"

namespace mantissa::data {

inline constexpr int32_t kLlmcMagic16 = 20240520;  // version 1, uint16 ids
inline constexpr int32_t kLlmcMagic32 = 20240801;  // version 7, uint32 ids
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;
// Largest vocabulary a token model may have (ids are held as int32).
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;
// Most shard files one split may have.
inline constexpr size_t kMaxShards = 10000;

// A run of little-endian token ids in memory, not owned: the byte corpus
// (width 1) or part of a token file (width 2 or 4).
struct TokenSpan {
  const unsigned char* data = nullptr;
  int width = 1;     // bytes per id
  int64_t size = 0;  // ids
  // out[k] = id (first + k) for k in [0, n); first + n <= size.
  void copy(int64_t first, int64_t n, int32_t* out) const;
};

// One token file, mapped read-only (open with O_NOFOLLOW; only a regular
// file is mapped). Move-only: the mapping lives as long as the object.
class TokenFile {
 public:
  // Throws DataError naming the path: missing, a symbolic link, not a
  // regular file, empty, a bad magic or version, a header count that
  // disagrees with the file size, an odd size for uint16 ids.
  static TokenFile open(const std::string& path);
  TokenFile(TokenFile&& o) noexcept;
  TokenFile& operator=(TokenFile&& o) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  const std::string& path() const { return path_; }
  const std::string& format() const { return format_; }  // e.g. "llm.c uint16"
  TokenSpan tokens() const { return tokens_; }
  uint32_t max_id() const { return max_id_; }
  // Index of the first id >= vocab, or -1.
  int64_t first_at_or_above(uint32_t vocab) const;

 private:
  TokenFile() = default;
  std::string path_, format_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  TokenSpan tokens_;
  uint32_t max_id_ = 0;
};

// The vocabulary a language model's ids index: the rows of its token
// embedding (0 for a model without one).
int64_t model_vocab(nn::Model& model);

// True when --data names token data: a directory holding a *.bin file, a
// file named *.bin, or a file that starts with an llm.c magic. Anything
// else is byte-level text (and a directory is refused as such).
bool is_token_data(const std::string& path);

class TokenCorpus {
 public:
  // A directory (two splits) or one file (split at the end); see the top.
  // Throws DataError naming the path and the problem.
  static TokenCorpus load(const std::string& path, double val_fraction = 0.1);

  const std::string& path() const { return path_; }
  // The ids of each split, one span per shard file (one for unsharded data).
  const std::vector<TokenSpan>& train_shards() const { return train_; }
  const std::vector<TokenSpan>& val_shards() const { return val_; }
  // The split as one span; throws DataError for sharded data, which a
  // reader must take shard by shard.
  TokenSpan train() const { return only(train_, "training"); }
  TokenSpan val() const { return only(val_, "validation"); }
  int64_t train_size() const { return total(train_); }
  int64_t val_size() const { return total(val_); }
  uint32_t max_id() const;
  // Throws DataError unless every id is below vocab: the file, the token
  // offset in it and the id are named.
  void check_vocab(int64_t vocab) const;
  // Throws DataError naming the files and sizes unless every shard of both
  // splits holds at least one window of seq_len + 1 tokens.
  void check_seq_len(int64_t seq_len) const;
  // "llm.c uint16: 9000 training tokens (a_train.bin), 1000 validation tokens (a_val.bin)"
  std::string summary() const;

 private:
  TokenSpan only(const std::vector<TokenSpan>& split, const char* name) const;
  static int64_t total(const std::vector<TokenSpan>& split);
  std::string path_;
  std::vector<TokenFile> files_;  // the training files, then the validation files
  size_t train_files_ = 0;         // how many of files_ hold training ids
  std::vector<TokenSpan> train_, val_;
};

}  // namespace mantissa::data
