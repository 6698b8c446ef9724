// TokenCorpus: the training and validation splits of token files (a
// directory's pair, or one file's end held out) and the checks on them.
#include "mantissa/data/tokens.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mantissa::data {

namespace fs = std::filesystem;

namespace {

// The files of a token directory's two splits (see tokens.hpp).
struct SplitFiles {
  std::vector<std::string> train, val;
};

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

// For "P_train.bin" or "P_train_000001.bin" and split "train": P; else "".
std::string prefix_of(const std::string& name, const std::string& split) {
  if (!name.ends_with(".bin")) return "";
  const std::string stem = name.substr(0, name.size() - 4);
  const std::string tag = "_" + split;
  if (stem.size() > tag.size() && stem.ends_with(tag)) return stem.substr(0, stem.size() - tag.size());
  const size_t at = stem.rfind(tag + "_");
  if (at == std::string::npos || at == 0 || !all_digits(stem.substr(at + tag.size() + 1))) return "";
  return stem.substr(0, at);
}

SplitFiles split_files(const std::string& dir) {
  const std::string where = "token directory '" + dir + "'";
  std::error_code ec;
  const fs::path d(dir);
  const bool train = fs::exists(fs::symlink_status(d / "train.bin", ec)),
             val = fs::exists(fs::symlink_status(d / "val.bin", ec));
  if (train && val) return {{(d / "train.bin").string()}, {(d / "val.bin").string()}};
  if (train || val)
    throw DataError(where + " has " +
                    (train ? "train.bin but no val.bin" : "val.bin but no train.bin") +
                    " (both splits are needed)");
  std::map<std::string, SplitFiles> by_prefix;
  size_t seen = 0;
  for (const auto& e : fs::directory_iterator(d, ec)) {
    const std::string name = e.path().filename().string();
    for (const char* split : {"train", "val"}) {
      const std::string p = prefix_of(name, split);
      if (p.empty()) continue;
      SplitFiles& f = by_prefix[p];
      (split[0] == 't' ? f.train : f.val).push_back(e.path().string());
      if (++seen > 2 * kMaxShards)
        throw DataError(where + " holds more than " + std::to_string(kMaxShards) + " shards per split");
    }
  }
  if (ec) throw DataError(where + " cannot be listed: " + ec.message());
  std::vector<std::string> prefixes;
  for (const auto& [p, f] : by_prefix)
    if (!f.train.empty()) prefixes.push_back(p);
  if (prefixes.empty())
    throw DataError(where +
                    " holds no token files: expected train.bin and val.bin (nanoGPT), "
                    "PREFIX_train.bin and PREFIX_val.bin (llm.c) or llm.c's shards "
                    "PREFIX_train_NNNNNN.bin and PREFIX_val_NNNNNN.bin");
  if (prefixes.size() > 1) {
    std::string names;
    for (const std::string& p : prefixes) names += (names.empty() ? "" : ", ") + p + "_train*.bin";
    throw DataError(where + " holds the training files of several corpora (" + names +
                    "): pass a directory with one");
  }
  SplitFiles f = by_prefix[prefixes[0]];
  if (f.val.empty())
    throw DataError(where + " has " + fs::path(f.train[0]).filename().string() + " but no " + prefixes[0] +
                    "_val.bin (nor " + prefixes[0] + "_val_NNNNNN.bin shards)");
  if (f.train.size() > kMaxShards || f.val.size() > kMaxShards)
    throw DataError(where + " holds more than " + std::to_string(kMaxShards) + " shards per split");
  std::sort(f.train.begin(), f.train.end());
  std::sort(f.val.begin(), f.val.end());
  return f;
}

}  // namespace

TokenCorpus TokenCorpus::load(const std::string& path, double val_fraction) {
  if (!(val_fraction > 0 && val_fraction < 1))
    throw DataError("validation fraction must be in (0, 1), got " + std::to_string(val_fraction));
  TokenCorpus c;
  c.path_ = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const SplitFiles f = split_files(path);
    for (const std::string& file : f.train) c.files_.push_back(TokenFile::open(file));
    c.train_files_ = c.files_.size();
    for (const std::string& file : f.val) c.files_.push_back(TokenFile::open(file));
    for (size_t i = 0; i < c.files_.size(); ++i)
      (i < c.train_files_ ? c.train_ : c.val_).push_back(c.files_[i].tokens());
    return c;
  }
  c.files_.push_back(TokenFile::open(path));
  c.train_files_ = 1;
  const TokenSpan all = c.files_[0].tokens();
  const auto held_out =
      static_cast<int64_t>(std::floor(static_cast<double>(all.size) * val_fraction));
  const int64_t n_train = all.size - held_out;
  c.train_ = {{all.data, all.width, n_train}};
  c.val_ = {{all.data + n_train * all.width, all.width, held_out}};
  return c;
}

TokenSpan TokenCorpus::only(const std::vector<TokenSpan>& split, const char* name) const {
  if (split.size() != 1)
    throw DataError("token data '" + path_ + "': the " + name + " split is " + std::to_string(split.size()) +
                    " shards, which this reader takes only as one file");
  return split[0];
}

int64_t TokenCorpus::total(const std::vector<TokenSpan>& split) {
  int64_t n = 0;
  for (const TokenSpan& s : split) n += s.size;
  return n;
}

uint32_t TokenCorpus::max_id() const {
  uint32_t m = 0;
  for (const TokenFile& f : files_) m = std::max(m, f.max_id());
  return m;
}

void TokenCorpus::check_vocab(int64_t vocab) const {
  if (vocab <= 0 || vocab > kMaxVocab)
    throw DataError("vocabulary size " + std::to_string(vocab) + " is outside [1, 2^24]");
  for (const TokenFile& f : files_) {
    if (f.max_id() < vocab) continue;
    const int64_t at = f.first_at_or_above(static_cast<uint32_t>(vocab));
    int32_t id = 0;
    f.tokens().copy(at, 1, &id);
    throw DataError(
        "token file '" + f.path() + "': id " + std::to_string(static_cast<uint32_t>(id)) +
        " at token offset " + std::to_string(at) + " is not below the vocabulary size " +
        std::to_string(vocab) + " (largest id in the file: " + std::to_string(f.max_id()) + ")");
  }
}

void TokenCorpus::check_seq_len(int64_t seq_len) const {
  if (seq_len <= 0)
    throw DataError("sequence length must be positive, got " + std::to_string(seq_len));
  // Sharded: every shard must hold a window (a window never spans two).
  for (size_t i = 0; files_.size() > 2 && i < files_.size(); ++i)
    if (files_[i].tokens().size < seq_len + 1)
      throw DataError("sequence length " + std::to_string(seq_len) + " is too long for shard '" + files_[i].path() +
                      "' (" + std::to_string(files_[i].tokens().size) + " tokens); every shard needs at least " +
                      std::to_string(seq_len + 1) + " tokens");
  if (train_size() < seq_len + 1 || val_size() < seq_len + 1)
    throw DataError("sequence length " + std::to_string(seq_len) + " is too long for '" + path_ +
                    "' (" + std::to_string(train_size()) + " training tokens, " +
                    std::to_string(val_size()) + " validation tokens); each split needs at least " +
                    std::to_string(seq_len + 1) + " tokens");
}

std::string TokenCorpus::summary() const {
  const std::string sizes = std::to_string(train_size()) + " training tokens";
  if (files_.size() == 1)
    return files_[0].format() + ": " + sizes + ", " + std::to_string(val_size()) +
           " validation tokens (the end of the file)";
  // "a_train.bin" for one file, "3 shards, a_train_000001.bin ... a_train_000003.bin" for several.
  auto names = [&](size_t first, size_t end) {
    const std::string head = fs::path(files_[first].path()).filename().string();
    if (end - first == 1) return head;
    return std::to_string(end - first) + " shards, " + head + " ... " +
           fs::path(files_[end - 1].path()).filename().string();
  };
  const TokenFile& v = files_[train_files_];
  return files_[0].format() + ": " + sizes + " (" + names(0, train_files_) + "), " + std::to_string(val_size()) +
         " validation tokens (" + names(train_files_, files_.size()) +
         (v.format() == files_[0].format() ? "" : ", " + v.format()) + ")";
}

}  // namespace mantissa::data
