#include "mantissa/data/mlm.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "data/rng_util.hpp"
#include "mantissa/io/untrusted.hpp"

namespace mantissa::data {

namespace {

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

void check_sizes(const TextCorpus& corpus, int64_t batch, int64_t seq_len) {
  if (batch <= 0) throw DataError("batch size must be positive, got " + std::to_string(batch));
  if (seq_len < kMinMlmSeqLen)
    throw DataError("masked-LM rows need a sequence length of at least " + std::to_string(kMinMlmSeqLen) + ", got " +
                    std::to_string(seq_len));
  corpus.check_seq_len(seq_len);
  if (batch > (int64_t{1} << 31) / seq_len)
    throw DataError("masked-LM batch: " + std::to_string(batch) + " rows of " + std::to_string(seq_len) +
                    " tokens exceed 2^31 tokens");
}

nn::Batch empty_batch(int64_t rows, int64_t T) {
  return {Tensor::empty({rows, T}, DType::i32), Tensor::empty({rows, T}, DType::i32)};
}

// BERT's corruption of a chosen byte at in[p]: [MASK] 80%, random byte 10%, kept 10%.
void corrupt(int32_t* in, int32_t* targets, int64_t p, const MlmTokens& tok, std::mt19937_64& rng) {
  targets[p] = in[p];
  const double v = uniform01(rng);
  if (v < 0.8) in[p] = tok.mask();
  else if (v < 0.9) in[p] = static_cast<int32_t>(detail::uniform_below(rng, static_cast<uint64_t>(tok.byte_vocab)));
}

}  // namespace

void mlm_row(const uint8_t* text, int64_t size, int64_t T, const MlmTokens& tok, std::mt19937_64& rng, int32_t* in,
             int32_t* targets) {
  const bool two = (rng() >> 63) != 0;
  const int64_t room = T - (two ? 3 : 2), lo = std::max<int64_t>(2, room / 4);
  const int64_t n = lo + static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(room - lo + 1)));
  const int64_t a = two ? 1 + static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(n - 1))) : n;
  const int64_t start_a = static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(size - n + 1)));
  int64_t t = 0;
  std::vector<int64_t> text_pos;
  text_pos.reserve(static_cast<size_t>(n));
  auto put = [&](const uint8_t* s, int64_t len) {
    for (int64_t i = 0; i < len; ++i) text_pos.push_back(t), in[t++] = s[i];
  };
  in[t++] = tok.cls();
  put(text + start_a, a);
  in[t++] = tok.sep();
  if (two) {
    const int64_t b = n - a;
    const bool follows = (rng() >> 63) != 0;
    const int64_t start_b =
        follows ? start_a + a : static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(size - b + 1)));
    put(text + start_b, b);
    in[t++] = tok.sep();
  }
  std::fill(in + t, in + T, tok.pad());
  std::fill(targets, targets + T, -1);
  bool any = false;
  for (int64_t p : text_pos)
    if (uniform01(rng) < 0.15) corrupt(in, targets, p, tok, rng), any = true;
  if (!any) corrupt(in, targets, text_pos[detail::uniform_below(rng, text_pos.size())], tok, rng);
}

MlmBatches::MlmBatches(const TextCorpus& corpus, int64_t batch, int64_t seq_len, uint64_t seed, MlmTokens tok)
    : corpus_(&corpus), batch_(batch), seq_len_(seq_len), seed_(seed), rng_(seed), tok_(tok) {
  check_sizes(corpus, batch, seq_len);
}

nn::Batch MlmBatches::next() {
  nn::Batch b = empty_batch(batch_, seq_len_);
  for (int64_t r = 0; r < batch_; ++r)
    mlm_row(corpus_->train_bytes(), corpus_->train_size(), seq_len_, tok_, rng_, b.inputs.data<int32_t>() + r * seq_len_,
            b.targets.data<int32_t>() + r * seq_len_);
  ++batches_;
  return b;
}

std::string MlmBatches::state_json() const {
  return nlohmann::json{{"kind", "mlm_batches"}, {"seed", seed_}, {"batches", batches_},
                        {"rng", detail::engine_state(rng_)}}
      .dump();
}

void MlmBatches::load_state(const std::string& json) {
  nlohmann::json j;
  try {
    j = io::parse_json(json, "data state");
  } catch (const std::invalid_argument& e) {
    throw DataError(e.what());
  }
  if (io::string_or_empty(j, "kind") != "mlm_batches") throw DataError("data state is not a 'mlm_batches' state");
  if (!j.contains("rng") || !j["rng"].is_string() || !j.contains("batches") || !j["batches"].is_number_integer())
    throw DataError("mlm_batches state needs 'rng' and 'batches'");
  detail::set_engine_state(rng_, j["rng"].get<std::string>(), "mlm_batches state");
  batches_ = j["batches"].get<int64_t>();
  if (batches_ < 0) throw DataError("mlm_batches state: negative batch count " + std::to_string(batches_));
}

MlmValidation::MlmValidation(const TextCorpus& corpus, int64_t batch, int64_t seq_len, int64_t max_batches,
                             MlmTokens tok) {
  check_sizes(corpus, batch, seq_len);
  const int64_t rows_all = std::max(batch, corpus.val_size() / seq_len);
  const int64_t n = max_batches > 0 ? std::min(max_batches, (rows_all + batch - 1) / batch) : (rows_all + batch - 1) / batch;
  std::mt19937_64 rng(0x6d6c6d2d76616cULL);  // fixed: every run is scored on the same rows
  for (int64_t i = 0; i < n; ++i) {
    const int64_t rows = std::min(batch, rows_all - i * batch);
    nn::Batch b = empty_batch(rows, seq_len);
    for (int64_t r = 0; r < rows; ++r)
      mlm_row(corpus.val_bytes(), corpus.val_size(), seq_len, tok, rng, b.inputs.data<int32_t>() + r * seq_len,
              b.targets.data<int32_t>() + r * seq_len);
    batches_.push_back(std::move(b));
  }
}

nn::Batch MlmValidation::batch(int64_t index) const {
  if (index < 0 || index >= num_batches())
    throw std::out_of_range("validation batch " + std::to_string(index) + " of " + std::to_string(num_batches()));
  const nn::Batch& b = batches_[static_cast<size_t>(index)];
  return {b.inputs.clone(), b.targets.clone()};
}

}  // namespace mantissa::data
