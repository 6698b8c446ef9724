// BERT's configuration as transformers' BertConfig keys (config.json), and
// what the encoder reads from a batch's ids (bert_inputs).
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <type_traits>

#include "mantissa/io/untrusted.hpp"
#include "mantissa/nn/bert.hpp"
#include "mantissa/tensor/checked.hpp"
#include "nn/fixed_keys.hpp"
#include "nn/parametrisation.hpp"

namespace mantissa::nn {

namespace {

// hidden_act: the GELU form it names (transformers' ACT2FN keys).
kernels::GeluForm read_gelu_form(const nlohmann::json& j) {
  if (!j.contains("hidden_act")) return kernels::GeluForm::erf;  // transformers' default "gelu"
  const nlohmann::json& v = j["hidden_act"];
  if (v == "gelu") return kernels::GeluForm::erf;
  if (v == "gelu_new" || v == "gelu_pytorch_tanh") return kernels::GeluForm::tanh;
  throw std::invalid_argument("BERT config: 'hidden_act' is " + io::excerpt_json(v) +
                              ", but mantissa's BERT computes GELU only (accepted: \"gelu\", the exact erf form; "
                              "\"gelu_new\" or \"gelu_pytorch_tanh\", the tanh approximation)");
}

double read_rate(const nlohmann::json& j, const char* key, double absent) {
  if (!j.contains(key)) return absent;
  if (!j[key].is_number() || !(j[key].get<double>() >= 0 && j[key].get<double>() < 1))
    throw std::invalid_argument(std::string("BERT config: '") + key + "' must be a number in [0, 1), got " +
                                io::excerpt_json(j[key]));
  return j[key].get<double>();
}

void check_id(const char* what, int32_t id, int64_t vocab) {
  if (id < -1 || id >= vocab)
    throw std::invalid_argument(std::string("BERT config: ") + what + " " + std::to_string(id) +
                                " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

}  // namespace

void BertConfig::validate() const {
  check_dimension("BERT", "byte_vocab", byte_vocab);
  if (vocab_size != 0) check_dimension("BERT", "vocab_size", vocab_size);
  check_dimension("BERT", "context", context);
  check_dimension("BERT", "layers", layers);
  check_dimension("BERT", "d_model", d_model);
  check_dimension("BERT", "heads", heads);
  check_dimension("BERT", "type_vocab", type_vocab);
  if (hidden < 0) throw std::invalid_argument("BERT config: hidden must not be negative, got " + std::to_string(hidden));
  check_dimension("BERT", "intermediate size", ffn());
  if (byte_level() && type_vocab < 2)
    throw std::invalid_argument("BERT config: type_vocab_size must be at least 2 (two segments)");
  if (d_model % heads != 0)
    throw std::invalid_argument("BERT config: d_model " + std::to_string(d_model) + " is not a multiple of heads " +
                                std::to_string(heads));
  if (!(layer_norm_eps > 0 && std::isfinite(layer_norm_eps) && static_cast<float>(layer_norm_eps) > 0))
    throw std::invalid_argument("BERT config: 'layer_norm_eps' must be a positive fp32 number, got " +
                                std::to_string(layer_norm_eps));
  if (!(hidden_dropout >= 0 && hidden_dropout < 1 && attention_dropout >= 0 && attention_dropout < 1))
    throw std::invalid_argument("BERT config: dropout rates must be in [0, 1)");
  if (!byte_level()) {
    check_id("pad_token_id", pad_token, vocab_size);
    if (pad_token < 0) throw std::invalid_argument("BERT config: pad_token_id must be an id, got " + std::to_string(pad_token));
    check_id("cls_token_id", cls_token, vocab_size);
    check_id("sep_token_id", sep_token, vocab_size);
    check_id("mask_token_id", mask_token, vocab_size);
    const int32_t ids[] = {pad_token, cls_token, sep_token, mask_token};
    for (int i = 0; i < 4; ++i)
      for (int k = i + 1; k < 4; ++k)
        if (ids[i] >= 0 && ids[i] == ids[k])
          throw std::invalid_argument("BERT config: the [PAD], [CLS], [SEP] and [MASK] ids must differ, two are " +
                                      std::to_string(ids[i]));
  }
  // Tables [V + T + types, C]; per layer 4 C^2 + 2 C F matrices; the head's C^2 (small terms left out).
  const char* what = "BERT config: parameter count";
  const int64_t C = d_model, F = ffn();
  const int64_t per_layer = checked_add(checked_mul(4 * C, C, what), checked_mul(2 * C, F, what), what);
  int64_t n = checked_mul(vocab() + context + type_vocab, C, what);
  n = checked_add(n, checked_add(checked_mul(layers, per_layer, what), checked_mul(C, C, what), what), what);
  check_parameter_total("BERT", n);
  unit.validate();
}

std::string BertConfig::to_json() const {
  nlohmann::ordered_json j;
  j["model_type"] = "bert";
  j["architectures"] = {"BertForMaskedLM"};
  j["vocab_size"] = vocab();
  j["hidden_size"] = d_model;
  j["num_hidden_layers"] = layers;
  j["num_attention_heads"] = heads;
  j["intermediate_size"] = ffn();
  j["hidden_act"] = gelu_form == kernels::GeluForm::erf ? "gelu" : "gelu_new";
  j["hidden_dropout_prob"] = hidden_dropout;
  j["attention_probs_dropout_prob"] = attention_dropout;
  j["max_position_embeddings"] = context;
  j["type_vocab_size"] = type_vocab;
  j["initializer_range"] = 0.02;
  j["layer_norm_eps"] = layer_norm_eps;
  j["pad_token_id"] = pad_id();
  j["position_embedding_type"] = "absolute";
  j["tie_word_embeddings"] = true;
  j["torch_dtype"] = "float32";
  nlohmann::ordered_json m = {{"kind", "bert"}, {"seed", seed}, {"norm", pre_norm ? "pre" : "post"}};
  if (byte_level()) m["byte_vocab"] = byte_vocab;
  const std::pair<const char*, int32_t> ids[] = {{"cls_token_id", cls_id()}, {"sep_token_id", sep_id()}, {"mask_token_id", mask_id()}};
  for (const auto& [key, id] : ids)
    if (id >= 0) m[key] = id;
  write_parametrisation(m, unit);
  j["mantissa"] = m;
  return j.dump(2);
}

BertConfig BertConfig::from_json(const std::string& text) {
  const nlohmann::json j = io::parse_json(text, "BERT config");
  if (!j.is_object()) throw std::invalid_argument("BERT config: not a JSON object");
  BertConfig c;
  auto get = [&](const nlohmann::json& o, const char* key, auto& out) {
    if (!o.contains(key)) throw std::invalid_argument(std::string("BERT config: missing key '") + key + "'");
    if (!o[key].is_number_integer()) throw std::invalid_argument(std::string("BERT config: '") + key + "' must be an integer");
    using T = std::remove_reference_t<decltype(out)>;
    const int64_t v = o[key].template get<int64_t>();
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
      throw std::invalid_argument(std::string("BERT config: '") + key + "' is out of range");
    out = static_cast<T>(v);
  };
  int64_t vocab = 0;
  get(j, "vocab_size", vocab);
  check_dimension("BERT", "vocab_size", vocab);
  get(j, "max_position_embeddings", c.context);
  get(j, "hidden_size", c.d_model);
  get(j, "num_hidden_layers", c.layers);
  get(j, "num_attention_heads", c.heads);
  get(j, "intermediate_size", c.hidden);
  if (j.contains("type_vocab_size")) get(j, "type_vocab_size", c.type_vocab);
  c.gelu_form = read_gelu_form(j);
  if (j.contains("layer_norm_eps")) {
    if (!j["layer_norm_eps"].is_number()) throw std::invalid_argument("BERT config: 'layer_norm_eps' must be a number");
    c.layer_norm_eps = j["layer_norm_eps"].get<double>();
  } else {
    c.layer_norm_eps = 1e-12;  // transformers' default
  }
  c.hidden_dropout = read_rate(j, "hidden_dropout_prob", 0.1);  // transformers' defaults
  c.attention_dropout = read_rate(j, "attention_probs_dropout_prob", 0.1);
  const nlohmann::json m = j.contains("mantissa") && j["mantissa"].is_object() ? j["mantissa"] : nlohmann::json::object();
  try {
    if (m.contains("seed")) c.seed = m["seed"].get<uint64_t>();
    read_norm(m, c.pre_norm, "BERT");
    read_parametrisation(m, c.unit, "BERT");
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("BERT config: ") + e.what());
  }
  if (m.contains("byte_vocab")) {  // mantissa's byte-level layout
    int64_t bytes = 0;
    get(m, "byte_vocab", bytes);
    if (bytes + 4 != vocab)
      throw std::invalid_argument("BERT config: vocab_size " + std::to_string(vocab) + " is not byte_vocab " +
                                  std::to_string(bytes) + " + 4 special tokens");
    c.byte_vocab = bytes;
  } else {
    c.vocab_size = vocab;
    if (j.contains("pad_token_id") && !j["pad_token_id"].is_null()) get(j, "pad_token_id", c.pad_token);
    if (m.contains("cls_token_id")) get(m, "cls_token_id", c.cls_token);
    if (m.contains("sep_token_id")) get(m, "sep_token_id", c.sep_token);
    if (m.contains("mask_token_id")) get(m, "mask_token_id", c.mask_token);
  }
  c.validate();
  require_fixed_keys(j, "BERT",
                     {{"model_type", "bert", "a BERT"},
                      {"position_embedding_type", "absolute", "absolute position embeddings"},
                      {"tie_word_embeddings", true, "a decoder tied to the token embedding"},
                      {"is_decoder", false, "a bidirectional encoder"},
                      {"add_cross_attention", false, "no cross-attention"}});
  return c;
}

BertInputs bert_inputs(const BertConfig& c, const Tensor& ids) {
  if (!ids.defined() || ids.dtype() != DType::i32 || ids.ndim() != 2) throw std::invalid_argument("BERT: ids must be i32 [B, T]");
  const int64_t B = ids.dim(0), T = ids.dim(1);
  BertInputs in;
  in.key_len = Tensor::empty({B}, DType::i32);
  in.token_types = Tensor::empty({B, T}, DType::i32);
  in.positions = Tensor::empty({B, T}, DType::i32);
  const int32_t* id = ids.data<int32_t>();
  const int32_t cls = c.cls_id(), sep = c.sep_id(), pad = c.pad_id();
  const int32_t second = c.type_vocab >= 2 ? 1 : 0;  // one type only: every token takes type 0
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* row = id + b * T;
    int32_t* type = in.token_types.data<int32_t>() + b * T;
    const std::string where = "BERT: row " + std::to_string(b);
    if (cls >= 0 && row[0] != cls)
      throw std::invalid_argument(where + " does not start with [CLS] (id " + std::to_string(cls) + ")");
    int64_t len = T;
    int32_t segment = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t v = row[t];
      if (v < 0 || v >= c.vocab())
        throw std::invalid_argument(where + " position " + std::to_string(t) + ": id " + std::to_string(v) +
                                    " is outside the vocabulary [0, " + std::to_string(c.vocab()) + ")");
      if (v == pad && len == T) len = t;
      if (v != pad && len < T)
        throw std::invalid_argument(where + ": token at position " + std::to_string(t) + " follows [PAD] at position " +
                                    std::to_string(len) + " (padding must come last)");
      type[t] = len < T ? 0 : segment;
      if (v == sep) segment = second;
      in.positions.data<int32_t>()[b * T + t] = static_cast<int32_t>(t);
    }
    in.key_len.data<int32_t>()[b] = static_cast<int32_t>(len);
    in.tokens += len;
  }
  return in;
}

}  // namespace mantissa::nn
