#include "mantissa/data/text.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/rng_util.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/io/untrusted.hpp"
#include "mantissa/tensor/checked.hpp"

namespace mantissa::data {

namespace {

void check_positive(int64_t v, const char* what) {
  if (v <= 0) throw DataError(std::string(what) + " must be positive, got " + std::to_string(v));
}

nlohmann::json parse_state(const std::string& json, const char* kind) {
  nlohmann::json j;
  try {
    j = io::parse_json(json, "data state");
  } catch (const std::invalid_argument& e) {
    throw DataError(e.what());
  }
  if (const std::string got = io::string_or_empty(j, "kind"); got != kind)
    throw DataError(std::string("data state is a '") + io::excerpt(got) + "' state, not '" + kind +
                    "' (text_windows: byte-level text, token_windows: token files)");
  return j;
}

// A batch is two i32 tensors [batch, seq_len]: their element count must fit.
void check_batch_tokens(int64_t batch, int64_t seq_len) {
  try {
    if (checked_mul(batch, seq_len, "text batch: batch size x sequence length") > (int64_t{1} << 31))
      throw DataError("text batch: batch size " + std::to_string(batch) + " x sequence length " +
                      std::to_string(seq_len) + " exceeds 2^31 tokens");
  } catch (const DataError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw DataError(e.what());
  }
}

}  // namespace

TextCorpus TextCorpus::from_bytes(std::string bytes, const std::string& name, double val_fraction) {
  if (!(val_fraction > 0 && val_fraction < 1))
    throw DataError("validation fraction must be in (0, 1), got " + std::to_string(val_fraction));
  if (bytes.empty()) throw DataError("data file '" + name + "' is empty");
  TextCorpus c;
  c.path_ = name;
  c.bytes_ = std::move(bytes);
  const auto held_out = static_cast<int64_t>(std::floor(static_cast<double>(c.bytes_.size()) * val_fraction));
  c.train_size_ = c.size() - held_out;
  return c;
}

TextCorpus TextCorpus::load(const std::string& path, double val_fraction) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw DataError("data file '" + path + "' does not exist");
  std::string bytes;
  try {
    bytes = io::read_bounded(path, kMaxCorpusBytes);
  } catch (const std::invalid_argument& e) {
    throw DataError(std::string("data file: ") + e.what());
  }
  return from_bytes(std::move(bytes), path, val_fraction);
}

const uint8_t* TextCorpus::train_bytes() const { return reinterpret_cast<const uint8_t*>(bytes_.data()); }
const uint8_t* TextCorpus::val_bytes() const { return train_bytes() + train_size_; }

void TextCorpus::check_seq_len(int64_t seq_len) const {
  check_positive(seq_len, "sequence length");
  if (train_size() < seq_len + 1 || val_size() < seq_len + 1)
    throw DataError("sequence length " + std::to_string(seq_len) + " is too long for '" + path_ + "' (" +
                    std::to_string(size()) + " bytes: " + std::to_string(train_size()) + " for training, " +
                    std::to_string(val_size()) + " held out for validation); each part needs at least " +
                    std::to_string(seq_len + 1) + " bytes");
}

TextWindows::TextWindows(std::vector<TokenSpan> train, int64_t batch, int64_t seq_len, uint64_t seed)
    : train_(std::move(train)), batch_(batch), seq_len_(seq_len), seed_(seed), rng_(seed) {
  check_positive(batch, "batch size");
  check_batch_tokens(batch, seq_len);
  first_start_.push_back(0);
  for (const TokenSpan& s : train_) first_start_.push_back(first_start_.back() + static_cast<uint64_t>(s.size - seq_len));
}

TextWindows::TextWindows(const TextCorpus& corpus, int64_t batch, int64_t seq_len, uint64_t seed)
    : TextWindows((corpus.check_seq_len(seq_len), std::vector<TokenSpan>{corpus.train()}), batch, seq_len, seed) {}

TextWindows::TextWindows(std::shared_ptr<const TokenCorpus> corpus, int64_t vocab, int64_t batch, int64_t seq_len,
                         uint64_t seed)
    : TextWindows((corpus->check_seq_len(seq_len), corpus->check_vocab(vocab), corpus->train_shards()), batch,
                  seq_len, seed) {
  tokens_ = std::move(corpus);
  kind_ = "token_windows";
}

nn::Batch TextWindows::next() {
  nn::Batch b;
  b.inputs = Tensor::empty({batch_, seq_len_}, DType::i32);
  b.targets = Tensor::empty({batch_, seq_len_}, DType::i32);
  auto* in = b.inputs.data<int32_t>();
  auto* tg = b.targets.data<int32_t>();
  std::vector<int32_t> window(static_cast<size_t>(seq_len_ + 1));
  for (int64_t r = 0; r < batch_; ++r) {
    const uint64_t at = detail::uniform_below(rng_, first_start_.back());
    // The shard whose window starts hold `at`.
    const size_t k = static_cast<size_t>(std::upper_bound(first_start_.begin(), first_start_.end(), at) -
                                         first_start_.begin()) - 1;
    train_[k].copy(static_cast<int64_t>(at - first_start_[k]), seq_len_ + 1, window.data());
    std::copy(window.begin(), window.end() - 1, in + r * seq_len_);
    std::copy(window.begin() + 1, window.end(), tg + r * seq_len_);
  }
  ++batches_;
  return b;
}

std::string TextWindows::state_json() const {
  return nlohmann::json{{"kind", kind_}, {"seed", seed_}, {"batches", batches_}, {"rng", detail::engine_state(rng_)}}
      .dump();
}

void TextWindows::load_state(const std::string& json) {
  const std::string& k = kind_;
  nlohmann::json j = parse_state(json, k.c_str());
  if (!j.contains("rng") || !j["rng"].is_string() || !j.contains("batches") || !j["batches"].is_number_integer())
    throw DataError(k + " state needs 'rng' and 'batches'");
  detail::set_engine_state(rng_, j["rng"].get<std::string>(), k + " state");
  batches_ = j["batches"].get<int64_t>();
  if (batches_ < 0) throw DataError(k + " state: negative batch count " + std::to_string(batches_));
  if (j.contains("seed")) {
    if (!j["seed"].is_number_unsigned()) throw DataError(k + " state: 'seed' must be an unsigned integer");
    seed_ = j["seed"].get<uint64_t>();
  }
}

TextValidation::TextValidation(std::vector<TokenSpan> val, int64_t batch, int64_t seq_len, int64_t max_batches)
    : val_(std::move(val)), batch_(batch), seq_len_(seq_len) {
  check_positive(batch, "batch size");
  check_batch_tokens(batch, seq_len);
  for (size_t s = 0; s < val_.size(); ++s) {
    // Targets are tokens 1..V-1 of the shard; full windows cover 1..n_full*T.
    const int64_t V = val_[s].size;
    const int64_t n_full = (V - 1) / seq_len;
    for (int64_t k = 0; k < n_full; ++k) {
      starts_.push_back(k * seq_len);
      skip_.push_back(0);
    }
    const int64_t rest = (V - 1) - n_full * seq_len;
    if (rest > 0) {
      starts_.push_back(V - seq_len - 1);
      skip_.push_back(seq_len - rest);
    }
    shard_.resize(starts_.size(), static_cast<int32_t>(s));
  }
  // max_batches x batch < size, so the product cannot overflow.
  if (max_batches > 0 && max_batches <= (static_cast<int64_t>(starts_.size()) - 1) / batch) {
    starts_.resize(static_cast<size_t>(max_batches * batch));
    skip_.resize(starts_.size());
    shard_.resize(starts_.size());
  }
}

TextValidation::TextValidation(const TextCorpus& corpus, int64_t batch, int64_t seq_len, int64_t max_batches)
    : TextValidation((corpus.check_seq_len(seq_len), std::vector<TokenSpan>{corpus.val()}), batch, seq_len,
                     max_batches) {}

TextValidation::TextValidation(std::shared_ptr<const TokenCorpus> corpus, int64_t vocab, int64_t batch,
                               int64_t seq_len, int64_t max_batches)
    : TextValidation((corpus->check_seq_len(seq_len), corpus->check_vocab(vocab), corpus->val_shards()), batch,
                     seq_len, max_batches) {
  tokens_ = std::move(corpus);
}

int64_t TextValidation::num_batches() const { return num_windows() / batch_ + (num_windows() % batch_ != 0); }

int64_t TextValidation::num_targets() const {
  int64_t n = 0;
  for (int64_t s : skip_) n += seq_len_ - s;
  return n;
}

nn::Batch TextValidation::batch(int64_t index) const {
  if (index < 0 || index >= num_batches())
    throw std::out_of_range("validation batch " + std::to_string(index) + " of " + std::to_string(num_batches()));
  const int64_t first = index * batch_;
  const int64_t rows = std::min(batch_, num_windows() - first);
  nn::Batch b;
  b.inputs = Tensor::empty({rows, seq_len_}, DType::i32);
  b.targets = Tensor::empty({rows, seq_len_}, DType::i32);
  auto* in = b.inputs.data<int32_t>();
  auto* tg = b.targets.data<int32_t>();
  std::vector<int32_t> window(static_cast<size_t>(seq_len_ + 1));
  for (int64_t r = 0; r < rows; ++r) {
    const auto k = static_cast<size_t>(first + r);
    val_[static_cast<size_t>(shard_[k])].copy(starts_[k], seq_len_ + 1, window.data());
    for (int64_t t = 0; t < seq_len_; ++t) {
      in[r * seq_len_ + t] = window[static_cast<size_t>(t)];
      tg[r * seq_len_ + t] = t < skip_[k] ? -1 : window[static_cast<size_t>(t + 1)];
    }
  }
  return b;
}

}  // namespace mantissa::data
