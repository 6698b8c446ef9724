// The parts of the tokenizer (include/mantissa/data/tokenizer.hpp) shared by
// its source files: UTF-8 stepping, the Unicode classes the Hugging Face
// `tokenizers` components use (ICU behind them, tokenizer_unicode.cpp), the
// two models (tokenizer_bpe.cpp, tokenizer_wordpiece.cpp) and the parsed
// tokenizer.json (tokenizer_json.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mantissa::data::tok {

// ---- UTF-8 (input already checked well-formed) ----

// The code point starting at s[i]; i advances past it.
inline char32_t next_cp(std::string_view s, size_t& i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned c = b(0);
  char32_t cp;
  if (c < 0x80) {
    cp = c;
    i += 1;
  } else if (c < 0xE0) {
    cp = ((c & 0x1Fu) << 6) | (b(1) & 0x3Fu);
    i += 2;
  } else if (c < 0xF0) {
    cp = ((c & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
    i += 3;
  } else {
    cp = ((c & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu);
    i += 4;
  }
  return cp;
}

inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// ---- Unicode classes (tokenizer_unicode.cpp) ----

// The GPT-2 pre-tokenizer regex's classes: \p{L}, \p{N}, \s (White_Space),
// anything else. ICU 72 follows Unicode 15; the Oniguruma `tokenizers` 0.23
// runs the regex with follows Unicode 16, so only characters new in 16 differ.
enum class Gpt2Class : uint8_t { letter, number, space, other };
Gpt2Class gpt2_class(char32_t c);
// White_Space (Rust's char::is_whitespace).
bool is_space(char32_t c);
// BertNormalizer / BertPreTokenizer classes. `tokenizers` takes marks,
// punctuation and "other" from the unicode_categories crate, whose tables are
// Unicode 8.0: characters assigned later count as none of these, here too
// (ICU's character age), and the few whose category changed since keep their
// 8.0 one.
bool is_bert_control(char32_t c);      // Cc, Cf, Co (not \t \n \r), as of Unicode 8.0
bool is_bert_punctuation(char32_t c);  // ASCII punctuation, or P* as of Unicode 8.0
bool is_chinese(char32_t c);           // the CJK ideograph blocks BERT spaces out
bool is_word_char(char32_t c);         // \w of Rust's regex (added tokens' single_word)
// Appends the NFD form of s without its nonspacing marks (Mn as of Unicode
// 8.0), each character lowercased when `lower`.
void strip_accents(std::string_view s, bool lower, std::string& out);
// Rust's char::to_lowercase: the full mapping (U+0130 gives two characters).
void append_lower(std::string& out, char32_t c);

// ---- Vocabulary ----

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

// The byte -> character map of GPT-2's byte-level BPE (printable bytes stand
// for themselves, the others for U+0100 upward), as UTF-8.
const std::string& byte_char(unsigned char b);

// ---- Models: each appends the ids of one pre-tokenized word ----
// `byte_level`: the word is raw bytes to be read through byte_char (the
// ByteLevel pre-tokenizer ran); otherwise it is the word's own characters.

struct BpeOptions {
  std::string unk_token;  // empty: none
  std::string continuing_subword_prefix, end_of_word_suffix;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
};

class BpeModel {
 public:
  // merges in rank order; throws std::invalid_argument (prefixed by where)
  // for a merge whose parts or result are not in the vocabulary.
  BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt,
           const std::string& where);
  ~BpeModel();
  void encode(std::string_view word, bool byte_level, std::vector<uint32_t>& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class WordPieceModel {
 public:
  // Throws std::invalid_argument (prefixed by where) when unk_token is not in the vocabulary.
  WordPieceModel(Vocab vocab, std::string unk_token, std::string prefix, uint64_t max_chars,
                 const std::string& where);
  ~WordPieceModel();
  void encode(std::string_view word, bool byte_level, std::vector<uint32_t>& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- tokenizer.json, parsed (tokenizer_json.cpp) ----

struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true;
};

struct BertNormalizerSpec {
  bool present = false;
  bool clean_text = true, handle_chinese_chars = true, strip_accents = true, lowercase = true;
};

enum class PreTokenizerKind { none, byte_level, bert };
struct PreTokenizerSpec {
  PreTokenizerKind kind = PreTokenizerKind::none;
  bool add_prefix_space = false, use_regex = true;  // byte_level only
};

struct Spec {
  BertNormalizerSpec normalizer;
  PreTokenizerSpec pre_tokenizer;
  std::vector<AddedToken> added;
  std::string model_type;  // "BPE" or "WordPiece"
  std::unique_ptr<BpeModel> bpe;
  std::unique_ptr<WordPieceModel> wordpiece;
  uint64_t vocab_size = 0;  // largest id + 1, added tokens included
};

// Throws std::invalid_argument "<where>: <key> ..." for anything not
// implemented or malformed.
Spec parse_spec(std::string_view json_text, const std::string& where);

}  // namespace mantissa::data::tok
