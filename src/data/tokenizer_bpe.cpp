// Byte-pair encoding as the Hugging Face `tokenizers` BPE model runs it: a
// word starts as one symbol per character (per byte for byte-level BPE),
// then the adjacent pair of lowest merge rank is merged, leftmost first among
// equal ranks, until no pair has a rank (a heap of candidate merges, stale
// entries skipped, as `tokenizers` does, so even odd merge lists give its
// result). Words repeat, so each word's ids are cached.
#include <algorithm>
#include <cstdio>
#include <queue>
#include <stdexcept>
#include <string>

#include "data/tokenizer_impl.hpp"

namespace mantissa::data::tok {

namespace {

uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

struct Rank {
  uint32_t rank, new_id;
};

struct Symbol {
  uint32_t id;
  int32_t prev, next;
  bool alive;
};

struct Candidate {
  uint32_t rank, new_id;
  int32_t pos;
  // std::priority_queue pops the largest: the largest is the lowest rank, then the leftmost.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

// Bounds of the word cache: words longer than this are rare and not reused.
constexpr size_t kCacheWordBytes = 256;
constexpr size_t kCacheWords = size_t{1} << 20;

}  // namespace

struct BpeModel::Impl {
  Vocab vocab;
  std::unordered_map<uint64_t, Rank> merges;
  BpeOptions opt;
  int64_t unk_id = -1;       // -1: no unk token (unknown characters are dropped)
  bool unk_missing = false;  // an unk_token that is not in the vocabulary
  int64_t byte_ids[256];     // byte-level symbol ids (no prefix/suffix), -1 if absent
  bool plain = true;         // no continuing prefix / end-of-word suffix
  // word -> [offset, count) in cached_ids
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> cache;
  std::vector<uint32_t> cached_ids;
  std::vector<Symbol> symbols;  // scratch
  std::string unit;             // scratch

  int64_t lookup(std::string_view s) const {
    const auto it = vocab.find(s);
    return it == vocab.end() ? int64_t{-1} : int64_t{it->second};
  }

  // The symbol id of one character (or byte) of the word, -1 if not in the vocabulary.
  int64_t unit_id(std::string_view ch, bool first, bool last) {
    if (plain) return lookup(ch);
    unit.clear();
    if (!first) unit += opt.continuing_subword_prefix;
    unit += ch;
    if (last) unit += opt.end_of_word_suffix;
    return lookup(unit);
  }

  void push(uint32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  }

  // A character not in the vocabulary: its bytes as <0xNN> tokens (byte_fallback,
  // when all are there), else the unk token; `unit` is the character as looked
  // up (with prefix or suffix), whose bytes `tokenizers` falls back to.
  void unknown(std::string_view looked_up, int64_t& pending_unk) {
    if (opt.byte_fallback) {
      const auto byte_id = [&](char c) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(c));
        return lookup(name);
      };
      const bool all = std::all_of(looked_up.begin(), looked_up.end(), [&](char c) { return byte_id(c) >= 0; });
      if (all) {
        for (char c : looked_up) push(static_cast<uint32_t>(byte_id(c)));
        return;
      }
    }
    if (opt.unk_token.empty()) return;  // `tokenizers` drops it silently
    if (unk_missing) throw std::invalid_argument("BPE: unk_token '" + opt.unk_token + "' is not in the vocabulary");
    if (pending_unk >= 0 && !opt.fuse_unk) push(static_cast<uint32_t>(pending_unk));
    pending_unk = unk_id;
  }

  void initial_symbols(std::string_view word, bool byte_level) {
    symbols.clear();
    int64_t pending_unk = -1;  // an unk not yet pushed (fuse_unk merges a run of them)
    const auto add = [&](std::string_view ch, int64_t id) {
      if (id >= 0) {
        if (pending_unk >= 0) push(static_cast<uint32_t>(pending_unk));
        pending_unk = -1;
        push(static_cast<uint32_t>(id));
      } else {
        unknown(plain ? ch : std::string_view(unit), pending_unk);
      }
    };
    if (byte_level) {
      for (size_t i = 0; i < word.size(); ++i) {
        const auto b = static_cast<unsigned char>(word[i]);
        const std::string& ch = byte_char(b);
        add(ch, plain ? byte_ids[b] : unit_id(ch, i == 0, i + 1 == word.size()));
      }
    } else {
      for (size_t i = 0; i < word.size();) {
        const size_t start = i;
        next_cp(word, i);
        const std::string_view ch = word.substr(start, i - start);
        add(ch, unit_id(ch, start == 0, i == word.size()));
      }
    }
    if (pending_unk >= 0) push(static_cast<uint32_t>(pending_unk));
    if (!symbols.empty()) symbols.back().next = -1;
  }

  const Rank* merge_of(uint32_t a, uint32_t b) const {
    const auto it = merges.find(pair_key(a, b));
    return it == merges.end() ? nullptr : &it->second;
  }

  void merge_all() {
    std::priority_queue<Candidate> queue;
    for (size_t i = 0; i + 1 < symbols.size(); ++i)
      if (const Rank* r = merge_of(symbols[i].id, symbols[i + 1].id))
        queue.push({r->rank, r->new_id, static_cast<int32_t>(i)});
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& left = symbols[static_cast<size_t>(top.pos)];
      if (!left.alive || left.next < 0) continue;
      Symbol& right = symbols[static_cast<size_t>(left.next)];
      const Rank* now = merge_of(left.id, right.id);
      if (!now || now->new_id != top.new_id) continue;  // a stale entry
      left.id = top.new_id;
      right.alive = false;
      left.next = right.next;
      if (left.next >= 0) symbols[static_cast<size_t>(left.next)].prev = top.pos;
      if (left.prev >= 0)
        if (const Rank* r = merge_of(symbols[static_cast<size_t>(left.prev)].id, left.id))
          queue.push({r->rank, r->new_id, left.prev});
      if (left.next >= 0)
        if (const Rank* r = merge_of(left.id, symbols[static_cast<size_t>(left.next)].id))
          queue.push({r->rank, r->new_id, top.pos});
    }
  }
};

BpeModel::BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt,
                   const std::string& where)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.vocab = std::move(vocab);
  m.opt = std::move(opt);
  m.plain = m.opt.continuing_subword_prefix.empty() && m.opt.end_of_word_suffix.empty();
  if (!m.opt.unk_token.empty()) {
    m.unk_id = m.lookup(m.opt.unk_token);
    m.unk_missing = m.unk_id < 0;
  }
  for (int b = 0; b < 256; ++b) m.byte_ids[b] = m.lookup(byte_char(static_cast<unsigned char>(b)));
  const size_t prefix = m.opt.continuing_subword_prefix.size();
  m.merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const std::string at = where + ": model.merges[" + std::to_string(rank) + "]";
    const int64_t a_id = m.lookup(a), b_id = m.lookup(b);
    if (a_id < 0 || b_id < 0) throw std::invalid_argument(at + ": '" + (a_id < 0 ? a : b) + "' is not in model.vocab");
    if (b.size() < prefix || b.compare(0, prefix, m.opt.continuing_subword_prefix) != 0)
      throw std::invalid_argument(at + ": '" + b + "' does not start with the continuing_subword_prefix");
    const std::string merged = a + b.substr(prefix);
    const int64_t new_id = m.lookup(merged);
    if (new_id < 0) throw std::invalid_argument(at + ": the merged token '" + merged + "' is not in model.vocab");
    // A repeated pair takes its last rank, as `tokenizers` builds its map.
    m.merges[pair_key(static_cast<uint32_t>(a_id), static_cast<uint32_t>(b_id))] = {
        static_cast<uint32_t>(rank), static_cast<uint32_t>(new_id)};
  }
}

BpeModel::~BpeModel() = default;

void BpeModel::encode(std::string_view word, bool byte_level, std::vector<uint32_t>& out) {
  Impl& m = *impl_;
  if (word.empty()) return;
  if (const auto hit = m.cache.find(word); hit != m.cache.end()) {
    const auto [first, count] = hit->second;
    out.insert(out.end(), m.cached_ids.begin() + first, m.cached_ids.begin() + first + count);
    return;
  }
  const size_t out_first = out.size();
  int64_t whole = -1;
  if (m.opt.ignore_merges) {  // a word in the vocabulary is one token
    if (byte_level) {
      m.unit.clear();
      for (char c : word) m.unit += byte_char(static_cast<unsigned char>(c));
      whole = m.lookup(m.unit);
    } else {
      whole = m.lookup(word);
    }
  }
  if (whole >= 0) {
    out.push_back(static_cast<uint32_t>(whole));
  } else {
    m.initial_symbols(word, byte_level);
    m.merge_all();
    for (const Symbol& s : m.symbols)
      if (s.alive) out.push_back(s.id);
  }
  if (word.size() <= kCacheWordBytes && m.cache.size() < kCacheWords && m.cached_ids.size() < (size_t{1} << 31)) {
    const auto first = static_cast<uint32_t>(m.cached_ids.size());
    m.cached_ids.insert(m.cached_ids.end(), out.begin() + static_cast<std::ptrdiff_t>(out_first), out.end());
    m.cache.emplace(std::string(word), std::make_pair(first, static_cast<uint32_t>(out.size() - out_first)));
  }
}

}  // namespace mantissa::data::tok
