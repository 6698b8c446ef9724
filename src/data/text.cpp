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
  if (io::string_or_empty(j, "kind") != kind)
    throw DataError(std::string("data state is not a '") + kind + "' state");
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

TextWindows::TextWindows(const TextCorpus& corpus, int64_t batch, int64_t seq_len, uint64_t seed)
    : corpus_(&corpus), batch_(batch), seq_len_(seq_len), seed_(seed), rng_(seed) {
  check_positive(batch, "batch size");
  corpus.check_seq_len(seq_len);
  check_batch_tokens(batch, seq_len);
}

nn::Batch TextWindows::next() {
  nn::Batch b;
  b.inputs = Tensor::empty({batch_, seq_len_}, DType::i32);
  b.targets = Tensor::empty({batch_, seq_len_}, DType::i32);
  auto* in = b.inputs.data<int32_t>();
  auto* tg = b.targets.data<int32_t>();
  const uint8_t* text = corpus_->train_bytes();
  const auto starts = static_cast<uint64_t>(corpus_->train_size() - seq_len_);
  for (int64_t r = 0; r < batch_; ++r) {
    const uint8_t* w = text + detail::uniform_below(rng_, starts);
    for (int64_t t = 0; t < seq_len_; ++t) {
      in[r * seq_len_ + t] = w[t];
      tg[r * seq_len_ + t] = w[t + 1];
    }
  }
  ++batches_;
  return b;
}

std::string TextWindows::state_json() const {
  return nlohmann::json{{"kind", "text_windows"}, {"seed", seed_}, {"batches", batches_},
                        {"rng", detail::engine_state(rng_)}}
      .dump();
}

void TextWindows::load_state(const std::string& json) {
  nlohmann::json j = parse_state(json, "text_windows");
  if (!j.contains("rng") || !j["rng"].is_string() || !j.contains("batches") || !j["batches"].is_number_integer())
    throw DataError("text_windows state needs 'rng' and 'batches'");
  detail::set_engine_state(rng_, j["rng"].get<std::string>(), "text_windows state");
  batches_ = j["batches"].get<int64_t>();
  if (batches_ < 0) throw DataError("text_windows state: negative batch count " + std::to_string(batches_));
  if (j.contains("seed")) {
    if (!j["seed"].is_number_unsigned()) throw DataError("text_windows state: 'seed' must be an unsigned integer");
    seed_ = j["seed"].get<uint64_t>();
  }
}

TextValidation::TextValidation(const TextCorpus& corpus, int64_t batch, int64_t seq_len, int64_t max_batches)
    : corpus_(&corpus), batch_(batch), seq_len_(seq_len) {
  check_positive(batch, "batch size");
  corpus.check_seq_len(seq_len);
  check_batch_tokens(batch, seq_len);
  // Targets are bytes 1..V-1 of the split; full windows cover 1..n_full*T.
  const int64_t V = corpus.val_size();
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
  // max_batches x batch < size, so the product cannot overflow.
  if (max_batches > 0 && max_batches <= (static_cast<int64_t>(starts_.size()) - 1) / batch) {
    starts_.resize(static_cast<size_t>(max_batches * batch));
    skip_.resize(starts_.size());
  }
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
  const uint8_t* text = corpus_->val_bytes();
  for (int64_t r = 0; r < rows; ++r) {
    const auto k = static_cast<size_t>(first + r);
    const uint8_t* w = text + starts_[k];
    for (int64_t t = 0; t < seq_len_; ++t) {
      in[r * seq_len_ + t] = w[t];
      tg[r * seq_len_ + t] = t < skip_[k] ? -1 : w[t + 1];
    }
  }
  return b;
}

}  // namespace mantissa::data
