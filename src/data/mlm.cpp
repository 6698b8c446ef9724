#include "mantissa/data/mlm.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "data/rng_util.hpp"
#include "mantissa/io/untrusted.hpp"
#include "mantissa/nn/bert.hpp"

namespace mantissa::data {

namespace {

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

template <class Corpus>
void check_sizes(const Corpus& corpus, int64_t batch, int64_t seq_len) {
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

// BERT's corruption of a chosen id at in[p]: [MASK] 80%, a random ordinary id 10%, kept 10%.
void corrupt(int32_t* in, int32_t* targets, int64_t p, const MlmTokens& tok, std::mt19937_64& rng) {
  targets[p] = in[p];
  const double v = uniform01(rng);
  if (v < 0.8) {
    in[p] = tok.mask();
  } else if (v < 0.9) {
    const auto n = static_cast<uint64_t>(tok.random_below);
    int32_t id = 0;
    do id = static_cast<int32_t>(detail::uniform_below(rng, n));
    while (tok.special(id));
    in[p] = id;
  }
}

}  // namespace

MlmTokens mlm_tokens(const nn::Model& model, bool token_data) {
  const auto* bert = dynamic_cast<const nn::Bert*>(&model);
  if (bert == nullptr) throw DataError("masked-LM rows are for a BERT model, not " + model.kind());
  const nn::BertConfig& c = bert->config();
  if (c.byte_level() && token_data)
    throw DataError("a byte-level BERT (its ids 256 and up are [CLS], [SEP], [MASK] and [PAD]) trains on "
                    "byte-level text; token data needs a BERT whose tokenizer names its special ids (train "
                    "--init-from a transformers directory holding tokenizer.json)");
  if (!c.byte_level() && !token_data)
    throw DataError("a BERT with its tokenizer's vocabulary (" + std::to_string(c.vocab()) +
                    " ids) reads token data, not byte-level text: tokenize the text with `mantissa tokenize --tokenizer "
                    "DIR/tokenizer.json IN OUT.bin`");
  MlmTokens tok;
  tok.vocab = static_cast<int32_t>(c.vocab());
  tok.random_below = static_cast<int32_t>(c.byte_level() ? c.byte_vocab : c.vocab());
  tok.cls_id = c.cls_id(), tok.sep_id = c.sep_id(), tok.mask_id = c.mask_id(), tok.pad_id = c.pad_id();
  if (tok.random_below <= 4) throw DataError("masked-LM rows need ordinary ids beside the four special ones");
  std::string missing;
  for (const auto& [name, id] : {std::pair{"[CLS]", tok.cls_id}, std::pair{"[SEP]", tok.sep_id}, std::pair{"[MASK]", tok.mask_id}})
    if (id < 0) missing += (missing.empty() ? "" : ", ") + std::string(name);
  if (!missing.empty())
    throw DataError("masked-LM rows need the " + missing +
                    " id(s), which the model's directory does not name: add its tokenizer.json (or "
                    "special_tokens_map.json / tokenizer_config.json with vocab.txt), or set mantissa.cls_token_id, "
                    "sep_token_id and mask_token_id in its config.json");
  return tok;
}

void mlm_row(const TokenSpan& text, int64_t T, const MlmTokens& tok, std::mt19937_64& rng, int32_t* in,
             int32_t* targets) {
  const int64_t size = text.size;
  const bool two = (rng() >> 63) != 0;
  const int64_t room = T - (two ? 3 : 2), lo = std::max<int64_t>(2, room / 4);
  const int64_t n = lo + static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(room - lo + 1)));
  const int64_t a = two ? 1 + static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(n - 1))) : n;
  const int64_t start_a = static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(size - n + 1)));
  int64_t t = 0;
  std::vector<int64_t> text_pos;
  text_pos.reserve(static_cast<size_t>(n));
  auto put = [&](int64_t start, int64_t len) {
    text.copy(start, len, in + t);
    for (int64_t i = 0; i < len; ++i, ++t) {
      if (in[t] == tok.pad())
        throw DataError("the text holds the [PAD] id " + std::to_string(tok.pad()) + " at offset " +
                        std::to_string(start + i) + " of its split (padding marks the end of a masked-LM row)");
      if (!tok.special(in[t])) text_pos.push_back(t);
    }
  };
  in[t++] = tok.cls();
  put(start_a, a);
  in[t++] = tok.sep();
  if (two) {
    const int64_t b = n - a;
    const bool follows = (rng() >> 63) != 0;
    const int64_t start_b =
        follows ? start_a + a : static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(size - b + 1)));
    put(start_b, b);
    in[t++] = tok.sep();
  }
  std::fill(in + t, in + T, tok.pad());
  std::fill(targets, targets + T, -1);
  bool any = false;
  for (int64_t p : text_pos)
    if (uniform01(rng) < 0.15) corrupt(in, targets, p, tok, rng), any = true;
  if (!any && !text_pos.empty()) corrupt(in, targets, text_pos[detail::uniform_below(rng, text_pos.size())], tok, rng);
}

MlmBatches::MlmBatches(const TextCorpus& corpus, int64_t batch, int64_t seq_len, uint64_t seed, MlmTokens tok)
    : text_(corpus.train()), batch_(batch), seq_len_(seq_len), seed_(seed), rng_(seed), tok_(tok) {
  check_sizes(corpus, batch, seq_len);
}

MlmBatches::MlmBatches(std::shared_ptr<const TokenCorpus> corpus, int64_t batch, int64_t seq_len, uint64_t seed,
                       MlmTokens tok)
    : tokens_(std::move(corpus)), text_(tokens_->train()), batch_(batch), seq_len_(seq_len), seed_(seed), rng_(seed),
      tok_(tok) {
  check_sizes(*tokens_, batch, seq_len);
  tokens_->check_vocab(tok.vocab);
}

nn::Batch MlmBatches::next() {
  nn::Batch b = empty_batch(batch_, seq_len_);
  for (int64_t r = 0; r < batch_; ++r)
    mlm_row(text_, seq_len_, tok_, rng_, b.inputs.data<int32_t>() + r * seq_len_, b.targets.data<int32_t>() + r * seq_len_);
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
                             MlmTokens tok)
    : MlmValidation((check_sizes(corpus, batch, seq_len), corpus.val()), batch, seq_len, max_batches, tok) {}

MlmValidation::MlmValidation(const TokenCorpus& corpus, int64_t batch, int64_t seq_len, int64_t max_batches,
                             MlmTokens tok)
    : MlmValidation((check_sizes(corpus, batch, seq_len), corpus.check_vocab(tok.vocab), corpus.val()), batch, seq_len,
                    max_batches, tok) {
  per_token_ = true;
}

MlmValidation::MlmValidation(const TokenSpan& text, int64_t batch, int64_t seq_len, int64_t max_batches,
                             const MlmTokens& tok) {
  const int64_t rows_all = std::max(batch, text.size / seq_len);
  const int64_t n = max_batches > 0 ? std::min(max_batches, (rows_all + batch - 1) / batch) : (rows_all + batch - 1) / batch;
  std::mt19937_64 rng(0x6d6c6d2d76616cULL);  // fixed: every run is scored on the same rows
  for (int64_t i = 0; i < n; ++i) {
    const int64_t rows = std::min(batch, rows_all - i * batch);
    nn::Batch b = empty_batch(rows, seq_len);
    for (int64_t r = 0; r < rows; ++r)
      mlm_row(text, seq_len, tok, rng, b.inputs.data<int32_t>() + r * seq_len, b.targets.data<int32_t>() + r * seq_len);
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
