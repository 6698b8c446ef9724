// Tokenizing text with a Hugging Face tokenizer.json, id for id as the
// `tokenizers` library encodes it with add_special_tokens=False (no BOS/EOS,
// no [CLS]/[SEP]: a corpus is one stream; special tokens written in the text,
// such as "<|endoftext|>" between documents, are recognised as such), and
// writing ids in llm.c's token format, which TokenFile (tokens.hpp) reads.
//
// Implemented, and nothing else (any other component or option is refused
// with its key named, never tokenized differently):
//  - model BPE (merges by rank, unk_token, fuse_unk, byte_fallback,
//    ignore_merges, continuing_subword_prefix, end_of_word_suffix; dropout
//    null or 0) and WordPiece (continuing prefix, max_input_chars_per_word,
//    unk_token);
//  - normalizer BertNormalizer (clean text, Chinese characters, strip
//    accents, lowercase) or none;
//  - pre-tokenizer ByteLevel (GPT-2's regex and byte-to-character map,
//    add_prefix_space, use_regex), BertPreTokenizer, or none;
//  - added tokens (special or not, normalized or not, single_word, lstrip,
//    rstrip), matched leftmost-longest before the rest.
// Character classes come from ICU 72 (Unicode 15; `tokenizers` 0.23 has
// Unicode 16, so characters new in 16 may differ); BERT's marks, punctuation
// and control characters follow the Unicode 8.0 tables `tokenizers` uses for
// them. Every other character is classified as `tokenizers` does (a test
// checks each one).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mantissa::data {

// Largest tokenizer.json read (real ones are up to a few tens of MB).
inline constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t{256} << 20;
// Largest text file tokenized at once (its ids must fit llm.c's int32 count).
inline constexpr uint64_t kMaxTokenizeInputBytes = uint64_t{1} << 30;

class Tokenizer {
 public:
  // Reads path (at most kMaxTokenizerJsonBytes). Throws DataError naming the
  // file and the key for anything malformed or not implemented.
  static Tokenizer load(const std::string& path);
  // The same from the text of a tokenizer.json; `where` names it in errors.
  static Tokenizer parse(std::string_view json, const std::string& where);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The ids of text, which must be valid UTF-8 (DataError "<what>: not valid
  // UTF-8 (byte 0xNN at offset K ...)" otherwise). Not thread-safe: the
  // models cache the ids of the words they have seen.
  std::vector<uint32_t> encode(std::string_view text, const std::string& what = "text");
  // Largest id + 1 over the model's vocabulary and the added tokens.
  uint64_t vocab_size() const;
  // "byte-level BPE", "WordPiece", ...
  std::string kind() const;

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The bytes of an llm.c token file holding ids: magic 20240520 version 1 and
// uint16 ids when vocab_size <= 65536, else magic 20240801 version 7 and
// uint32 ids. Throws DataError for no ids, more than 2^31 - 1 ids, an id at
// or above vocab_size, or a vocab_size above 2^32.
std::string llmc_token_bytes(const std::vector<uint32_t>& ids, uint64_t vocab_size);

// Throws DataError unless path is absent or an llm.c token file (a regular
// file, not a symbolic link, starting with either magic).
void check_token_output(const std::string& path);

// Writes llmc_token_bytes to path through a temporary file and a rename, so
// an existing file is replaced whole or not at all. Refuses (DataError) a
// symbolic link, a directory, or an existing file that is not an llm.c token
// file: mantissa replaces only files of the kind it writes.
void write_token_file(const std::string& path, const std::vector<uint32_t>& ids, uint64_t vocab_size);

// The three files of a tokenize run: their paths, or the names errors call
// them by (the CLI's "--tokenizer", "IN", "OUT"; Python's argument names).
struct TokenizeFiles {
  std::string tokenizer, input, output;
};

// What tokenize_file read and wrote.
struct TokenizeSummary {
  size_t tokens = 0;
  size_t text_bytes = 0;
  uint64_t vocab_size = 0;
  std::string kind;             // Tokenizer::kind
  double load_seconds = 0;      // reading the tokenizer.json and the text
  double encode_seconds = 0;
};

// `mantissa tokenize`: refuses, before any work, an output that would
// overwrite an input or that write_token_file would refuse; loads the
// tokenizer; encodes the input (at most kMaxTokenizeInputBytes of UTF-8)
// whole; writes the ids with write_token_file. Throws DataError naming the
// file (by its entry in names) and what is wrong with it.
TokenizeSummary tokenize_file(const TokenizeFiles& paths, const TokenizeFiles& names);

}  // namespace mantissa::data
