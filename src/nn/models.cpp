#include "mantissa/nn/models.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "mantissa/nn/bert.hpp"
#include "mantissa/nn/gpt.hpp"
#include "mantissa/nn/llama.hpp"
#include "mantissa/nn/mlp.hpp"

namespace mantissa::nn {

namespace {

std::unique_ptr<Model> make_gpt(const ModelSize& s) {
  GPTConfig g;
  g.vocab = s.vocab;
  g.context = s.context;
  g.layers = s.layers;
  g.d_model = s.d_model;
  g.heads = s.heads;
  g.dropout = static_cast<float>(s.dropout);
  g.pre_norm = s.norm != "post";
  g.seed = s.seed;
  g.unit = s.unit;
  g.validate();
  return std::make_unique<GPT>(g);
}

std::unique_ptr<Model> make_llama(const ModelSize& s) {
  LlamaConfig l;
  l.vocab = s.vocab;
  l.context = s.context;
  l.layers = s.layers;
  l.d_model = s.d_model;
  l.heads = s.heads;
  l.kv_heads = s.kv_heads;
  l.hidden = s.ffn_hidden;
  l.tie_embeddings = s.tie_embeddings;
  l.smooth_swiglu = s.smooth_swiglu;
  l.seed = s.seed;
  l.unit = s.unit;
  l.validate();
  return std::make_unique<Llama>(l);
}

std::unique_ptr<Model> make_bert(const ModelSize& s) {
  BertConfig b;
  b.byte_vocab = s.vocab;
  b.context = s.context;
  b.layers = s.layers;
  b.d_model = s.d_model;
  b.heads = s.heads;
  b.hidden = s.ffn_hidden;
  b.pre_norm = s.norm == "pre";
  b.hidden_dropout = b.attention_dropout = s.dropout;  // not implemented: a rate above 0 cannot train
  b.seed = s.seed;
  b.unit = s.unit;
  b.validate();
  return std::make_unique<Bert>(b);
}

std::unique_ptr<Model> make_mlp(const ModelSize& s) {
  MLPConfig m;
  m.hidden.assign(static_cast<size_t>(s.layers), s.d_model);
  m.seed = s.seed;
  m.unit = s.unit;
  m.validate();
  return std::make_unique<MLP>(m);
}

template <class M, class Config>
std::unique_ptr<Model> load(const std::string& j) {
  return std::make_unique<M>(Config::from_json(j));
}
template <class Config>
void check(const std::string& j) {
  (void)Config::from_json(j);
}

}  // namespace

const std::vector<ModelKind>& model_kinds() {
  using T = Model::Task;
  static const std::vector<ModelKind> kinds = {
      {.name = "gpt",
       .title = "GPT",
       .task = T::language_model,
       .make = make_gpt,
       .load = load<GPT, GPTConfig>,
       .check = check<GPTConfig>,
       .options = {"norm", "dropout", "vocab-size", "checkpoint-activations"},
       .unit_lr = 0,
       .umup = true},
      // 2^-2: at the library's 2^-1 the unit Llama's activations outgrow
      // unit-fp8's unscaled e4m3fn casts on small models (docs/llama.md).
      {.name = "llama",
       .title = "Llama",
       .task = T::language_model,
       .make = make_llama,
       .load = load<Llama, LlamaConfig>,
       .check = check<LlamaConfig>,
       .options = {"kv-heads", "ffn-hidden", "tie-embeddings", "smooth-swiglu", "vocab-size"},
       .unit_lr = 0x1p-2,
       .umup = false},
      // 2^-2: at the library's 2^-1 the unit BERT is at the edge of stability,
      // and fp16's rounding alone keeps some seeds on the byte-frequency
      // plateau (docs/bert.md).
      {.name = "bert",
       .title = "BERT",
       .task = T::masked_language_model,
       .make = make_bert,
       .load = load<Bert, BertConfig>,
       .check = check<BertConfig>,
       .options = {"norm", "ffn-hidden", "dropout"},
       .unit_lr = 0x1p-2,
       .umup = false},
      {.name = "mlp",
       .title = "MLP",
       .task = T::classifier,
       .make = make_mlp,
       .load = load<MLP, MLPConfig>,
       .check = check<MLPConfig>,
       .options = {},
       .unit_lr = 0,
       .umup = false},
  };
  return kinds;
}

bool ModelKind::reads(const std::string& option) const {
  return std::find(options.begin(), options.end(), option) != options.end();
}

const ModelKind* find_model_kind(const std::string& name) {
  for (const ModelKind& k : model_kinds())
    if (k.name == name) return &k;
  return nullptr;
}

const ModelKind& default_model_kind(Model::Task task) {
  for (const ModelKind& k : model_kinds())
    if (k.task == task) return k;
  return model_kinds().front();
}

std::string model_kind_titles(const std::function<bool(const ModelKind&)>& keep) {
  std::string titles;
  for (const ModelKind& k : model_kinds())
    if (keep(k)) titles += (titles.empty() ? "" : ", ") + k.title;
  return "the " + titles + " only (--model " + model_kind_names(keep) + ")";
}

std::string model_kind_names(const std::function<bool(const ModelKind&)>& keep) {
  std::vector<std::string> names;
  for (const ModelKind& k : model_kinds())
    if (!keep || keep(k)) names.push_back(k.name);
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

std::string detect_model_kind(const std::string& config_json) {
  const nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
  if (!j.is_object()) return "";
  auto type = [&] { return j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : ""; };
  if (j.contains("n_embd") || type() == "gpt2") return "gpt";
  if (type() == "llama") return "llama";
  if (type() == "bert") return "bert";
  if (j.contains("hidden") || j.contains("classes")) return "mlp";
  return "";
}

}  // namespace mantissa::nn
