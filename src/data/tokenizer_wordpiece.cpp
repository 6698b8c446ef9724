// WordPiece as BERT and the Hugging Face `tokenizers` WordPiece model run it:
// greedy longest match first, the pieces after the first looked up with the
// continuing prefix ("##"); a word with a piece that matches nothing, or of
// more than max_input_chars_per_word characters, is the one unk token.
#include <stdexcept>
#include <string>

#include "data/tokenizer_impl.hpp"

namespace mantissa::data::tok {

namespace {
constexpr size_t kCacheWordBytes = 256;
constexpr size_t kCacheWords = size_t{1} << 20;
}  // namespace

struct WordPieceModel::Impl {
  Vocab vocab;
  std::string prefix;
  uint64_t max_chars = 100;
  uint32_t unk_id = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> cache;
  std::vector<uint32_t> cached_ids;
  std::string mapped;  // scratch: a byte-level word as characters

  void pieces(std::string_view word, std::vector<uint32_t>& out) const {
    const size_t first = out.size();
    std::string probe;
    std::vector<size_t> ends;  // character boundaries
    for (size_t i = 0; i < word.size();) {
      next_cp(word, i);
      ends.push_back(i);
    }
    if (ends.size() > max_chars) {
      out.push_back(unk_id);
      return;
    }
    size_t start = 0;
    while (start < word.size()) {
      // Longest [start, end) in the vocabulary: try ends from the last down.
      int64_t found = -1;
      size_t k = ends.size();
      while (k > 0 && ends[k - 1] > start) {
        const std::string_view sub = word.substr(start, ends[k - 1] - start);
        if (start > 0) {
          probe.assign(prefix);
          probe += sub;
        }
        const auto it = start > 0 ? vocab.find(probe) : vocab.find(sub);
        if (it != vocab.end()) {
          found = it->second;
          break;
        }
        --k;
      }
      if (found < 0) {  // one bad piece makes the whole word unknown
        out.resize(first);
        out.push_back(unk_id);
        return;
      }
      out.push_back(static_cast<uint32_t>(found));
      start = ends[k - 1];
    }
  }
};

WordPieceModel::WordPieceModel(Vocab vocab, std::string unk_token, std::string prefix, uint64_t max_chars,
                               const std::string& where)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.vocab = std::move(vocab);
  m.prefix = std::move(prefix);
  m.max_chars = max_chars;
  const auto it = m.vocab.find(unk_token);
  if (it == m.vocab.end())
    throw std::invalid_argument(where + ": model.unk_token '" + unk_token + "' is not in model.vocab");
  m.unk_id = it->second;
}

WordPieceModel::~WordPieceModel() = default;

void WordPieceModel::encode(std::string_view word, bool byte_level, std::vector<uint32_t>& out) {
  Impl& m = *impl_;
  if (word.empty()) return;
  if (byte_level) {  // the word as the ByteLevel pre-tokenizer hands it on
    m.mapped.clear();
    for (char c : word) m.mapped += byte_char(static_cast<unsigned char>(c));
    word = m.mapped;
  }
  if (const auto hit = m.cache.find(word); hit != m.cache.end()) {
    const auto [first, count] = hit->second;
    out.insert(out.end(), m.cached_ids.begin() + first, m.cached_ids.begin() + first + count);
    return;
  }
  const size_t out_first = out.size();
  m.pieces(word, out);
  if (word.size() <= kCacheWordBytes && m.cache.size() < kCacheWords && m.cached_ids.size() < (size_t{1} << 31)) {
    const auto first = static_cast<uint32_t>(m.cached_ids.size());
    m.cached_ids.insert(m.cached_ids.end(), out.begin() + static_cast<std::ptrdiff_t>(out_first), out.end());
    m.cache.emplace(std::string(word), std::make_pair(first, static_cast<uint32_t>(out.size() - out_first)));
  }
}

}  // namespace mantissa::data::tok
