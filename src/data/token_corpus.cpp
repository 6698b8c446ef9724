// TokenCorpus: the training and validation splits of token files (a
// directory's pair, or one file's end held out) and the checks on them.
#include "mantissa/data/tokens.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace mantissa::data {

namespace fs = std::filesystem;

namespace {

// The two split files of a token directory (see tokens.hpp).
std::pair<std::string, std::string> split_files(const std::string& dir) {
  const std::string where = "token directory '" + dir + "'";
  std::error_code ec;
  const fs::path d(dir);
  const bool train = fs::exists(fs::symlink_status(d / "train.bin", ec)),
             val = fs::exists(fs::symlink_status(d / "val.bin", ec));
  if (train && val) return {(d / "train.bin").string(), (d / "val.bin").string()};
  if (train || val)
    throw DataError(where + " has " +
                    (train ? "train.bin but no val.bin" : "val.bin but no train.bin") +
                    " (both splits are needed)");
  std::vector<std::string> prefixes;
  const std::string tail = "_train.bin";
  for (const auto& e : fs::directory_iterator(d, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > tail.size() &&
        name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
      prefixes.push_back(name.substr(0, name.size() - tail.size()));
  }
  if (ec) throw DataError(where + " cannot be listed: " + ec.message());
  if (prefixes.empty())
    throw DataError(where +
                    " holds no token files: expected train.bin and val.bin (nanoGPT) or "
                    "PREFIX_train.bin and PREFIX_val.bin (llm.c)");
  if (prefixes.size() > 1) {
    std::string names;
    for (const std::string& p : prefixes) names += (names.empty() ? "" : ", ") + p + tail;
    throw DataError(where + " holds several training files (" + names +
                    "): pass one of them, or a directory with one pair");
  }
  const fs::path val_file = d / (prefixes[0] + "_val.bin");
  if (!fs::exists(fs::symlink_status(val_file, ec)))
    throw DataError(where + " has " + prefixes[0] + tail + " but no " +
                    val_file.filename().string());
  return {(d / (prefixes[0] + tail)).string(), val_file.string()};
}

}  // namespace

TokenCorpus TokenCorpus::load(const std::string& path, double val_fraction) {
  if (!(val_fraction > 0 && val_fraction < 1))
    throw DataError("validation fraction must be in (0, 1), got " + std::to_string(val_fraction));
  TokenCorpus c;
  c.path_ = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const auto [train, val] = split_files(path);
    c.files_.push_back(TokenFile::open(train));
    c.files_.push_back(TokenFile::open(val));
    c.train_ = {0, 0, c.files_[0].tokens()};
    c.val_ = {1, 0, c.files_[1].tokens()};
    return c;
  }
  c.files_.push_back(TokenFile::open(path));
  const TokenSpan all = c.files_[0].tokens();
  const auto held_out =
      static_cast<int64_t>(std::floor(static_cast<double>(all.size) * val_fraction));
  const int64_t n_train = all.size - held_out;
  c.train_ = {0, 0, {all.data, all.width, n_train}};
  c.val_ = {0, n_train, {all.data + n_train * all.width, all.width, held_out}};
  return c;
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
  return files_[0].format() + ": " + sizes + " (" + fs::path(files_[0].path()).filename().string() +
         "), " + std::to_string(val_size()) + " validation tokens (" +
         fs::path(files_[1].path()).filename().string() +
         (files_[1].format() == files_[0].format() ? "" : ", " + files_[1].format()) + ")";
}

}  // namespace mantissa::data
