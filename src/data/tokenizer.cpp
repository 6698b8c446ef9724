// The tokenizer pipeline, in the order `tokenizers` runs it on one text:
//  1. added tokens that match the raw text (normalized: false) are cut out;
//  2. each remaining piece is normalized (BertNormalizer), then added tokens
//     that match the normalized text (normalized: true) are cut out;
//  3. each remaining piece is pre-tokenized into words (ByteLevel: optional
//     prefix space, GPT-2's regex; BertPreTokenizer: whitespace dropped,
//     punctuation alone) and each word goes through the model.
// Empty pieces are dropped at every step. Then the llm.c token file writer.
#include "mantissa/data/tokenizer.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "data/tokenizer_impl.hpp"
#include "mantissa/data/source.hpp"
#include "mantissa/data/tokens.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/io/untrusted.hpp"

namespace mantissa::data {

namespace {

using tok::AddedToken;
using tok::Gpt2Class;

// Added tokens by first byte, longest first: the first that matches at a
// position is the leftmost-longest match (as `tokenizers`' Aho-Corasick).
struct Matcher {
  struct Pattern {
    std::string text;
    const AddedToken* token;
  };
  std::vector<Pattern> by_byte[256];
  bool empty = true;

  void add(const std::string& text, const AddedToken* t) {
    if (text.empty()) return;
    Pattern p;
    p.text = text;
    p.token = t;
    by_byte[static_cast<unsigned char>(text.front())].push_back(std::move(p));
    empty = false;
  }
  void finish() {
    for (auto& v : by_byte)
      std::stable_sort(v.begin(), v.end(), [](const Pattern& a, const Pattern& b) { return a.text.size() > b.text.size(); });
  }
  const Pattern* at(std::string_view s, size_t i) const {
    for (const Pattern& p : by_byte[static_cast<unsigned char>(s[i])])
      if (s.size() - i >= p.text.size() && std::memcmp(s.data() + i, p.text.data(), p.text.size()) == 0) return &p;
    return nullptr;
  }
};

char32_t last_cp(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return tok::next_cp(s, i);
}

char32_t first_cp(std::string_view s) {
  size_t i = 0;
  return tok::next_cp(s, i);
}

// Splits s around the tokens of m: text pieces to `text`, matched ids to `id`.
template <class Text, class Id>
void split_added(std::string_view s, const Matcher& m, Text&& text, Id&& id) {
  if (m.empty) {
    if (!s.empty()) text(s);
    return;
  }
  size_t done = 0;  // s[0, done) has been handed on
  for (size_t i = 0; i < s.size();) {
    const Matcher::Pattern* p = m.at(s, i);
    if (!p) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + p->text.size();
    i = stop;  // matches never overlap, even when this one is discarded
    const AddedToken& t = *p->token;
    if (t.single_word && ((start > 0 && tok::is_word_char(last_cp(s.substr(0, start)))) ||
                          (stop < s.size() && tok::is_word_char(first_cp(s.substr(stop))))))
      continue;
    if (t.lstrip) {  // swallow the whitespace before it, back to the previous match
      size_t k = start;
      while (k > done) {
        size_t b = k - 1;
        while (b > done && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
        size_t e = b;
        if (!tok::is_space(tok::next_cp(s, e))) break;
        k = b;
      }
      start = k;
    }
    if (t.rstrip) {  // and the whitespace after it
      while (stop < s.size()) {
        size_t e = stop;
        if (!tok::is_space(tok::next_cp(s, e))) break;
        stop = e;
      }
    }
    start = std::max(start, done);
    if (done < start) text(s.substr(done, start - done));
    id(t.id);
    done = stop;
  }
  if (done < s.size()) text(s.substr(done));
}

// The words of GPT-2's pre-tokenizer regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matched by hand, alternative by alternative, with the regex's backtracking.
template <class Emit>
void split_gpt2(std::string_view s, Emit&& emit) {
  const size_t n = s.size();
  const auto cls = [&](size_t i, size_t& next) {
    next = i;
    return tok::gpt2_class(tok::next_cp(s, next));
  };
  const auto run_end = [&](size_t i, Gpt2Class k) {
    size_t j = i;
    while (i < n && cls(i, j) == k) i = j;
    return i;
  };
  for (size_t i = 0; i < n;) {
    const char c = s[i];
    if (c == '\'' && i + 1 < n) {
      const char d = s[i + 1], e = i + 2 < n ? s[i + 2] : '\0';
      size_t len = 0;
      if (d == 's' || d == 't' || d == 'm' || d == 'd')
        len = 2;
      else if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l'))
        len = 3;
      if (len) {
        emit(s.substr(i, len));
        i += len;
        continue;
      }
    }
    size_t j = 0;
    const Gpt2Class k0 = cls(i, j);
    if (c == ' ' && j < n) {  // " ?" before a letter, number or other run
      size_t j2 = 0;
      const Gpt2Class k1 = cls(j, j2);
      if (k1 != Gpt2Class::space) {
        const size_t end = run_end(j, k1);
        emit(s.substr(i, end - i));
        i = end;
        continue;
      }
    }
    if (k0 != Gpt2Class::space) {
      const size_t end = run_end(i, k0);
      emit(s.substr(i, end - i));
      i = end;
      continue;
    }
    // Whitespace: \s+(?!\S) takes the run but its last character when a
    // non-space follows (that one then leads the next word); \s+ takes a
    // lone one.
    size_t last = i, end = i;
    while (end < n) {
      size_t next = 0;
      if (cls(end, next) != Gpt2Class::space) break;
      last = end;
      end = next;
    }
    const size_t stop = (end == n || last == i) ? end : last;
    emit(s.substr(i, stop - i));
    i = stop;
  }
}

}  // namespace

struct Tokenizer::Impl {
  tok::Spec spec;
  Matcher raw, normalized;
  std::string norm, prefixed, word;  // scratch
  std::vector<uint32_t>* out = nullptr;

  void normalize(std::string_view in, std::string& result) const {
    const tok::BertNormalizerSpec& b = spec.normalizer;
    result.clear();
    if (!b.present) {
      result.assign(in);
      return;
    }
    std::string cleaned;
    cleaned.reserve(in.size());
    for (size_t i = 0; i < in.size();) {
      char32_t c = tok::next_cp(in, i);
      if (b.clean_text) {
        if (c == 0 || c == 0xFFFD || tok::is_bert_control(c)) continue;
        if (tok::is_space(c)) c = ' ';
      }
      if (b.handle_chinese_chars && tok::is_chinese(c)) {
        cleaned += ' ';
        tok::append_utf8(cleaned, c);
        cleaned += ' ';
      } else {
        tok::append_utf8(cleaned, c);
      }
    }
    if (b.strip_accents) {
      tok::strip_accents(cleaned, b.lowercase, result);
    } else if (b.lowercase) {
      for (size_t i = 0; i < cleaned.size();) tok::append_lower(result, tok::next_cp(cleaned, i));
    } else {
      result = std::move(cleaned);
    }
  }

  void model(std::string_view w, bool byte_level) {
    if (spec.bpe)
      spec.bpe->encode(w, byte_level, *out);
    else
      spec.wordpiece->encode(w, byte_level, *out);
  }

  void pre_tokenize(std::string_view piece) {
    const tok::PreTokenizerSpec& p = spec.pre_tokenizer;
    switch (p.kind) {
      case tok::PreTokenizerKind::none:
        model(piece, false);
        return;
      case tok::PreTokenizerKind::byte_level: {
        if (p.add_prefix_space && piece.front() != ' ') {
          prefixed.resize(piece.size() + 1);  // " " + piece (GCC 12 warns falsely on assign + append)
          prefixed[0] = ' ';
          std::memcpy(prefixed.data() + 1, piece.data(), piece.size());
          piece = prefixed;
        }
        if (p.use_regex)
          split_gpt2(piece, [&](std::string_view w) { model(w, true); });
        else
          model(piece, true);
        return;
      }
      case tok::PreTokenizerKind::bert: {
        size_t start = 0;  // of the current word
        for (size_t i = 0; i < piece.size();) {
          const size_t at = i;
          const char32_t c = tok::next_cp(piece, i);
          const bool space = tok::is_space(c);
          if (!space && !tok::is_bert_punctuation(c)) continue;
          if (start < at) model(piece.substr(start, at - start), false);
          if (!space) model(piece.substr(at, i - at), false);
          start = i;
        }
        if (start < piece.size()) model(piece.substr(start), false);
        return;
      }
    }
  }
};

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::parse(std::string_view json, const std::string& where) {
  Tokenizer t;
  Impl& m = *t.impl_;
  try {
    m.spec = tok::parse_spec(json, where);
  } catch (const DataError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw DataError(e.what());
  }
  for (const AddedToken& a : m.spec.added) {
    if (!a.normalized) {
      m.raw.add(a.content, &a);
    } else {
      std::string pattern;
      m.normalize(a.content, pattern);
      m.normalized.add(pattern, &a);
    }
  }
  m.raw.finish();
  m.normalized.finish();
  return t;
}

Tokenizer Tokenizer::load(const std::string& path) {
  const std::string where = "tokenizer '" + path + "'";
  std::string text;
  try {
    text = io::read_bounded(path, kMaxTokenizerJsonBytes);
  } catch (const std::invalid_argument& e) {
    throw DataError(std::string("tokenizer: ") + e.what());
  }
  return parse(text, where);
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text, const std::string& what) {
  try {
    io::require_utf8(text, what);
  } catch (const std::invalid_argument& e) {
    throw DataError(e.what());
  }
  Impl& m = *impl_;
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 4 + 16);
  m.out = &ids;
  const auto push_id = [&](uint32_t id) { ids.push_back(id); };
  split_added(text, m.raw, [&](std::string_view raw_piece) {
    std::string normalized;
    m.normalize(raw_piece, normalized);
    split_added(normalized, m.normalized, [&](std::string_view piece) { m.pre_tokenize(piece); }, push_id);
  }, push_id);
  m.out = nullptr;
  return ids;
}

uint64_t Tokenizer::vocab_size() const { return impl_->spec.vocab_size; }

std::string Tokenizer::kind() const {
  const tok::Spec& s = impl_->spec;
  std::string k = s.pre_tokenizer.kind == tok::PreTokenizerKind::byte_level ? "byte-level " : "";
  return k + s.model_type;
}

std::string llmc_token_bytes(const std::vector<uint32_t>& ids, uint64_t vocab_size) {
  if (ids.empty()) throw DataError("no tokens to write (llm.c token files hold at least one)");
  if (ids.size() > static_cast<size_t>(INT32_MAX))
    throw DataError(std::to_string(ids.size()) + " tokens are more than llm.c's header counts (2^31 - 1)");
  if (vocab_size > (uint64_t{1} << 32))
    throw DataError("a vocabulary of " + std::to_string(vocab_size) + " ids does not fit uint32 token ids");
  for (size_t k = 0; k < ids.size(); ++k)
    if (ids[k] >= vocab_size)
      throw DataError("token " + std::to_string(k) + " is id " + std::to_string(ids[k]) +
                      ", not below the vocabulary size " + std::to_string(vocab_size));
  const bool narrow = vocab_size <= 65536;
  const int width = narrow ? 2 : 4;
  std::string out(static_cast<size_t>(kLlmcHeaderBytes) + ids.size() * static_cast<size_t>(width), '\0');
  const int32_t header[3] = {narrow ? kLlmcMagic16 : kLlmcMagic32, narrow ? 1 : 7, static_cast<int32_t>(ids.size())};
  std::memcpy(out.data(), header, sizeof header);  // little-endian host (tokens.cpp asserts it)
  char* body = out.data() + kLlmcHeaderBytes;
  if (narrow) {
    for (size_t k = 0; k < ids.size(); ++k) {
      const auto v = static_cast<uint16_t>(ids[k]);
      std::memcpy(body + 2 * k, &v, 2);
    }
  } else {
    std::memcpy(body, ids.data(), ids.size() * 4);
  }
  return out;
}

void check_token_output(const std::string& path) {
  // Either llm.c magic marks a file this writer may replace.
  std::string sig16(4, '\0'), sig32(4, '\0');
  std::memcpy(sig16.data(), &kLlmcMagic16, 4);
  std::memcpy(sig32.data(), &kLlmcMagic32, 4);
  try {
    io::check_replaceable_file(path, sig16, "output");
  } catch (const std::invalid_argument& first) {
    try {
      io::check_replaceable_file(path, sig32, "output");
    } catch (const std::invalid_argument&) {
      throw DataError(first.what());
    }
  }
}

void write_token_file(const std::string& path, const std::vector<uint32_t>& ids, uint64_t vocab_size) {
  const std::string bytes = llmc_token_bytes(ids, vocab_size);
  check_token_output(path);
  io::write_file_atomic(path, bytes);
}

}  // namespace mantissa::data
