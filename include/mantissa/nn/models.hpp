// The library's models by kind ("gpt", "llama", "bert", "mlp"): what the CLI, the
// trainer and checkpoint loading build a model from. A new model adds its
// entry here (src/nn/models.cpp) and needs nothing outside nn/.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mantissa/nn/module.hpp"
#include "mantissa/unit/config.hpp"

namespace mantissa::nn {

// What `mantissa train`'s size flags say; each model reads the fields it has
// (the MLP: `layers` hidden layers of width `d_model`).
struct ModelSize {
  int64_t vocab = 256;
  int64_t context = 128;
  int64_t layers = 4;
  int64_t d_model = 256;
  int64_t heads = 4;
  int64_t kv_heads = 0;    // Llama: 0 = heads
  int64_t ffn_hidden = 0;  // Llama, BERT: 0 = the model's default width
  double dropout = 0;
  bool tie_embeddings = false;
  bool smooth_swiglu = false;
  std::string norm;  // "pre" or "post" blocks; "": the model's default (GPT pre, BERT post)
  uint64_t seed = 0;
  unit::UnitConfig unit;
};

struct ModelKind {
  std::string name;   // --model's value, Model::kind()
  std::string title;  // the model in messages
  Model::Task task;   // what the study trains it on and how the report ranks it (tasks.hpp)
  // Builds the model (its config validated: std::invalid_argument naming the field).
  std::function<std::unique_ptr<Model>(const ModelSize&)> make;
  // Builds it from the config.json its config_json() writes.
  std::function<std::unique_ptr<Model>(const std::string& config_json)> load;
  // Reads and validates such a config.json without building the model
  // (std::invalid_argument naming the key): what a loader checks before
  // allocating.
  std::function<void(const std::string& config_json)> check;
  // The optional settings it reads, by train's flag names: ModelSize's
  // ("norm", "dropout", "kv-heads", "ffn-hidden", "tie-embeddings",
  // "smooth-swiglu"), "vocab-size" (token data) and "checkpoint-activations"
  // (Model::set_activation_checkpointing); a kind refuses the others rather
  // than ignore them.
  std::vector<std::string> options;
  // Base learning rate of its unit-scaled recipes (Adam/AdamW) when --lr is
  // left at its default; 0: the library's, train::kUnitDefaultLr.
  double unit_lr = 0;
  // It builds the u-muP parametrisation (UnitConfig::umup, the umup-* recipes).
  bool umup = false;

  bool reads(const std::string& option) const;
};

// The most logits (rows x vocabulary) a causal LM's training or evaluation
// pass computes at once: above it the head and the loss run in chunks of rows
// (default 2^25, 128 MiB of fp32). With several chunks the head's weight
// gradient sums in another order, and a per-tensor current scale of the
// head's input applies per chunk.
int64_t logit_chunk_elements();
void set_logit_chunk_elements(int64_t n);

// Every kind, in a fixed order.
const std::vector<ModelKind>& model_kinds();
// The kind of this name, or null.
const ModelKind* find_model_kind(const std::string& name);
// The first kind of the task: what `train` builds without --model, and the
// study's model of the task.
const ModelKind& default_model_kind(Model::Task task = Model::Task::language_model);
// "the GPT only (--model gpt)" for messages: the kinds the filter keeps.
std::string model_kind_titles(const std::function<bool(const ModelKind&)>& keep);
// "gpt, llama, bert or mlp" for messages; with a filter, only the kinds it keeps.
std::string model_kind_names(const std::function<bool(const ModelKind&)>& keep = nullptr);
// The kind whose config.json this is (Hugging Face keys for the language
// models, the layer list for the MLP); "" when none matches.
std::string detect_model_kind(const std::string& config_json);

}  // namespace mantissa::nn
