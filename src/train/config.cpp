#include "mantissa/train/config.hpp"

#include <unistd.h>

#include "mantissa/io/files.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/io/untrusted.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace mantissa::train {

std::string default_model_name() { return nn::default_model_kind().name; }

bool text_model(const std::string& model) {
  const nn::ModelKind* k = nn::find_model_kind(model);
  return k == nullptr || k->task != nn::Model::Task::classifier;
}

bool masked_text_model(const std::string& model) {
  const nn::ModelKind* k = nn::find_model_kind(model);
  return k != nullptr && k->task == nn::Model::Task::masked_language_model;
}

using nlohmann::json;

std::vector<ConfigKey> config_keys(TrainConfig& c) {
  return {
      {"model", "model kind: gpt, llama, bert or mlp", &c.model},
      {"layers", "gpt: transformer blocks; mlp: hidden layers", &c.layers},
      {"d-model", "gpt: width; mlp: hidden width", &c.d_model},
      {"heads", "attention heads", &c.heads},
      {"dropout", "dropout probability", &c.dropout},
      {"kv-heads", "llama: key/value heads for grouped-query attention (0: = heads)", &c.kv_heads},
      {"ffn-hidden", "llama: SwiGLU width (0: the multiple of 64 nearest 8/3 d-model); bert: MLP width (0: 4 d-model)", &c.ffn_hidden},
      {"tie-embeddings", "llama: tie the output head to the token embedding", &c.tie_embeddings},
      {"smooth-swiglu", "llama: Smooth-SwiGLU (per-channel scale on the SwiGLU product)", &c.smooth_swiglu},
      {"norm", "gpt, bert: pre or post-norm blocks (default: gpt pre, bert post, the original BERT)", &c.norm},
      {"vocab-size", "gpt, llama on token data: vocabulary size (required unless resuming; ids must be below it)",
       &c.vocab_size},
      {"data",
       "training data: a UTF-8 text file, llm.c/nanoGPT token files (a .bin file or a directory with train.bin and "
       "val.bin or PREFIX_train.bin and PREFIX_val.bin) for gpt/llama, a " +
           nn::task_info(nn::Task::classifier).dataset + " directory (mlp); default corpus if empty",
       &c.data},
      {"batch-size", "sequences (or examples) per micro-batch, split across data-parallel ranks", &c.batch_size},
      {"seq-len", "tokens per sequence (gpt context)", &c.seq_len},
      {"grad-accum", "micro-batches per optimizer step", &c.grad_accum},
      {"steps", "optimizer steps to reach (total, also when resuming)", &c.steps},
      {"optimizer", "adamw, adam or sgd", &c.optimizer},
      {"lr", "peak learning rate", &c.lr},
      {"min-lr", "final learning rate of the cosine decay (default lr/10)", &c.min_lr},
      {"warmup", "linear warm-up steps", &c.warmup},
      {"weight-decay", "weight decay (decoupled for adamw)", &c.weight_decay},
      {"beta1", "Adam beta1", &c.beta1},
      {"beta2", "Adam beta2", &c.beta2},
      {"grad-clip", "clip the global gradient norm to this (0: off; default 1 for standard models, off for unit-scaled ones)", &c.grad_clip},
      {"seed", "seed of initialisation, data order and stochastic rounding", &c.seed},
      {"threads", "compute threads (0: default)", &c.threads},
      {"recipe", "precision recipe (mantissa recipes lists them)", &c.recipe},
      {"opt-level", "apex opt level O0..O3 (replaces --recipe)", &c.opt_level},
      {"loss-scale", "loss scaling: dynamic, none, or a static scale S", &c.loss_scale},
      {"init-scale", "initial dynamic loss scale", &c.init_scale},
      {"growth-interval", "clean steps before the dynamic scale grows", &c.growth_interval},
      {"growth-factor", "dynamic scale growth factor", &c.growth_factor},
      {"backoff-factor", "dynamic scale back-off factor on overflow", &c.backoff_factor},
      {"min-scale", "lower bound of the dynamic scale", &c.min_scale},
      {"max-scale", "upper bound of the dynamic scale", &c.max_scale},
      {"weight-rounding", "master -> working weight rounding: nearest or stochastic", &c.weight_rounding},
      {"set", "override any recipe setting: key=value (repeatable)", &c.set},
      {"grad-stats", "record gradient underflow/overflow fractions per parameter group", &c.grad_stats},
      {"comm-format", "data parallel: gradient wire format fp32, bf16, fp8 (e4m3), fp8-e4m3 or fp8-e5m2", &c.comm_format},
      {"comm-block", "data parallel, fp8: values per power-of-two scale", &c.comm_block},
      {"comm-error-feedback", "data parallel: add what the wire format dropped to the next step's gradient",
       &c.comm_error_feedback},
      {"comm-timeout", "data parallel: seconds a collective waits for the other ranks before the job stops",
       &c.comm_timeout},
      {"shard-optimizer",
       "data parallel: each rank keeps the optimizer state and master weights of its 1/N of the parameters (ZeRO 1)",
       &c.shard_optimizer},
      {"checkpoint-activations",
       "gpt: keep only every k-th block's input and recompute the block in backward (bare flag: k = 1; 0: off)",
       &c.checkpoint_activations},
      {"eval-every", "evaluate every N steps (0: only at the end)", &c.eval_every},
      {"eval-batches", "validation batches per evaluation", &c.eval_batches},
      {"log-every", "log line every N steps when not on a terminal", &c.log_every},
      {"metrics", "metrics file (JSON lines)", &c.metrics},
      {"save", "checkpoint directory (written every --save-every steps and at the end)", &c.save},
      {"save-every", "save every N steps (0: only at the end)", &c.save_every},
      {"resume", "resume from this checkpoint directory", &c.resume},
      {"init-from",
       "start a new run from the weights of this model directory (a mantissa save, or transformers' "
       "save_pretrained of GPT2LMHeadModel, LlamaForCausalLM or BertForMaskedLM); its config.json sets the model",
       &c.init_from},
      {"stop-after", "stop (and save) after N steps of this invocation; the schedule still spans --steps", &c.stop_after},
  };
}

namespace {

std::string normalise(std::string key) {
  for (char& ch : key)
    if (ch == '_') ch = '-';
  return key;
}

}  // namespace

void apply_config_file(TrainConfig& c, const std::string& path, const std::set<std::string>& given) {
  std::string text;
  try {
    text = io::read_bounded(path, 1 << 20);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("config file " + path + ": cannot be read (" + e.what() + ")");
  }
  const json j = io::parse_json(text, "config file " + path);
  if (!j.is_object()) throw std::invalid_argument("config file " + path + ": expected a JSON object of settings");
  auto keys = config_keys(c);
  for (const auto& item : j.items()) {
    const std::string& raw_key = item.key();
    const json& value = item.value();
    const std::string key = normalise(raw_key);
    ConfigKey* entry = nullptr;
    for (auto& k : keys)
      if (k.key == key) entry = &k;
    if (!entry) throw std::invalid_argument("config file " + path + ": unknown key \"" + io::excerpt(raw_key) + "\"");
    if (given.count(key)) continue;  // the command line wins
    auto wrong = [&](const char* want) {
      return std::invalid_argument("config file " + path + ": key \"" + raw_key + "\" must be " + want +
                                   " (got " + io::excerpt_json(value) + ")");
    };
    std::visit(
        [&](auto* target) {
          using T = std::remove_pointer_t<decltype(target)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            if (!value.is_number_integer()) throw wrong("an integer");
            if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{INT64_MAX})
              throw wrong("an integer below 2^63");
            *target = value.get<int64_t>();
          } else if constexpr (std::is_same_v<T, double>) {
            if (!value.is_number()) throw wrong("a number");
            *target = value.get<double>();
          } else if constexpr (std::is_same_v<T, bool>) {
            if (!value.is_boolean()) throw wrong("true or false");
            *target = value.get<bool>();
          } else if constexpr (std::is_same_v<T, std::string>) {
            if (value.is_string()) *target = value.get<std::string>();
            else if (value.is_number()) *target = value.dump();  // e.g. "loss-scale": 1024
            else throw wrong("a string");
          } else {
            if (!value.is_array()) throw wrong("an array of strings");
            target->clear();
            for (const auto& v : value) {
              if (!v.is_string()) throw wrong("an array of strings");
              target->push_back(v.get<std::string>());
            }
          }
        },
        entry->target);
    check_override(c, key);
  }
}

void check_override(TrainConfig& c, const std::string& key) {
  // Loss-scaling overrides: unset is their default (0 or -1); a value given
  // must be usable, not silently ignored.
  auto bad = [&](const std::string& want, const std::string& got) {
    throw std::invalid_argument("--" + key + " must be " + want + " (got " + got + ")");
  };
  if (key == "init-scale" && !(c.init_scale > 0 && std::isfinite(c.init_scale)))
    bad("a finite number > 0", std::to_string(c.init_scale));
  if (key == "growth-factor" && !(c.growth_factor > 0 && std::isfinite(c.growth_factor)))
    bad("a finite number > 0", std::to_string(c.growth_factor));
  if (key == "backoff-factor" && !(c.backoff_factor > 0 && std::isfinite(c.backoff_factor)))
    bad("a finite number > 0", std::to_string(c.backoff_factor));
  if (key == "growth-interval" && c.growth_interval <= 0) bad("a positive integer", std::to_string(c.growth_interval));
  if ((key == "min-scale" || key == "max-scale")) {
    const double v = key == "min-scale" ? c.min_scale : c.max_scale;
    if (!(v >= 0 && std::isfinite(v))) bad("a finite number >= 0", std::to_string(v));
  }
}

void validate(const TrainConfig& c) {
  auto positive = [](const char* flag, int64_t v) {
    if (v <= 0) throw std::invalid_argument(std::string("--") + flag + " must be positive (got " + std::to_string(v) + ")");
  };
  auto non_negative = [](const char* flag, int64_t v) {
    if (v < 0) throw std::invalid_argument(std::string("--") + flag + " must not be negative (got " + std::to_string(v) + ")");
  };
  auto finite_positive = [](const char* flag, double v) {
    if (!(v > 0) || !std::isfinite(v))
      throw std::invalid_argument(std::string("--") + flag + " must be a positive number (got " + std::to_string(v) + ")");
  };
  // Upper bounds keep sizes far from overflow and give a message instead of
  // std::bad_alloc; each is far beyond what trains on a CPU.
  auto at_most = [](const char* flag, int64_t v, int64_t cap) {
    if (v > cap)
      throw std::invalid_argument(std::string("--") + flag + " " + std::to_string(v) + " is too large (at most " +
                                  std::to_string(cap) + ")");
  };
  // Every text setting ends up in JSON (the run's config.json, checkpoints).
  TrainConfig texts = c;
  for (const ConfigKey& k : config_keys(texts)) {
    if (auto* s = std::get_if<std::string*>(&k.target)) io::require_utf8(**s, "--" + k.key);
    if (auto* v = std::get_if<std::vector<std::string>*>(&k.target))
      for (const std::string& s : **v) io::require_utf8(s, "--" + k.key);
  }
  at_most("layers", c.layers, 1024);
  at_most("d-model", c.d_model, 65536);
  at_most("heads", c.heads, 65536);
  at_most("batch-size", c.batch_size, 1 << 20);
  at_most("seq-len", c.seq_len, 1 << 20);
  at_most("grad-accum", c.grad_accum, 1 << 20);
  at_most("steps", c.steps, int64_t{1} << 40);
  at_most("eval-batches", c.eval_batches, 1 << 20);
  at_most("threads", c.threads, kernels::max_threads());
  at_most("vocab-size", c.vocab_size, int64_t{1} << 24);
  non_negative("vocab-size", c.vocab_size);
  auto reads = [&](const std::string& option) {
    const nn::ModelKind* k = nn::find_model_kind(c.model);
    return k != nullptr && k->reads(option);
  };
  auto readers = [](const std::string& option) {
    return nn::model_kind_names([&](const nn::ModelKind& k) { return k.reads(option); });
  };
  if (c.vocab_size > 0 && !reads("vocab-size"))
    throw std::invalid_argument("--vocab-size applies to --model " + readers("vocab-size") +
                                " on token data (got --model " + c.model + ")");
  if (c.batch_size * c.seq_len > (int64_t{1} << 30))
    throw std::invalid_argument("--batch-size x --seq-len (" + std::to_string(c.batch_size * c.seq_len) +
                                " tokens per micro-batch) is too large (at most 2^30)");
  if (nn::find_model_kind(c.model) == nullptr)
    throw std::invalid_argument("--model must be " + nn::model_kind_names() + " (got '" + c.model + "')");
  positive("layers", c.layers);
  positive("d-model", c.d_model);
  positive("heads", c.heads);
  if (text_model(c.model) && c.d_model % c.heads != 0)
    throw std::invalid_argument("--d-model (" + std::to_string(c.d_model) + ") must be a multiple of --heads (" +
                                std::to_string(c.heads) + ")");
  if (!(c.dropout >= 0 && c.dropout < 1)) throw std::invalid_argument("--dropout must be in [0, 1)");
  if (!c.norm.empty() && c.norm != "pre" && c.norm != "post")
    throw std::invalid_argument("--norm must be pre or post (got '" + c.norm + "')");
  // A model's own options are refused for the kinds that would ignore them.
  const TrainConfig defaults;
  const std::pair<std::string, bool> options[] = {
      {"norm", !c.norm.empty()},
      {"dropout", c.dropout != defaults.dropout},
      {"kv-heads", c.kv_heads != defaults.kv_heads},
      {"ffn-hidden", c.ffn_hidden != defaults.ffn_hidden},
      {"tie-embeddings", c.tie_embeddings != defaults.tie_embeddings},
      {"smooth-swiglu", c.smooth_swiglu != defaults.smooth_swiglu}};
  const nn::ModelKind& kind = *nn::find_model_kind(c.model);
  for (const auto& entry : options) {
    const std::string& option = entry.first;  // a name, not a binding: lambdas capture it
    if (entry.second && !kind.reads(option))
      throw std::invalid_argument("--" + option + " applies to --model " +
                                  nn::model_kind_names([&](const nn::ModelKind& k) { return k.reads(option); }) +
                                  " (got --model " + c.model + ")");
  }
  positive("batch-size", c.batch_size);
  positive("seq-len", c.seq_len);
  positive("grad-accum", c.grad_accum);
  positive("steps", c.steps);
  finite_positive("lr", c.lr);
  if (c.min_lr > c.lr) throw std::invalid_argument("--min-lr must not exceed --lr");
  non_negative("warmup", c.warmup);
  if (!(c.weight_decay >= 0)) throw std::invalid_argument("--weight-decay must not be negative");
  if (!(c.beta1 >= 0 && c.beta1 < 1)) throw std::invalid_argument("--beta1 must be in [0, 1)");
  if (!(c.beta2 >= 0 && c.beta2 < 1)) throw std::invalid_argument("--beta2 must be in [0, 1)");
  if (!(c.grad_clip >= 0 || c.grad_clip == TrainConfig{}.grad_clip))
    throw std::invalid_argument("--grad-clip must not be negative");
  non_negative("seed", c.seed);
  non_negative("threads", c.threads);
  non_negative("eval-every", c.eval_every);
  positive("eval-batches", c.eval_batches);
  positive("log-every", c.log_every);
  non_negative("save-every", c.save_every);
  non_negative("stop-after", c.stop_after);
  non_negative("checkpoint-activations", c.checkpoint_activations);
  if (text_model(c.model)) {
    // Weights, gradients and two Adam moments in fp32: 16 bytes a parameter
    // (a Llama block of the same width has about as many as a GPT block).
    const double d = static_cast<double>(c.d_model);
    const double vocab = static_cast<double>(c.vocab_size > 0 ? c.vocab_size : 256);
    const double params = static_cast<double>(c.layers) * 12 * d * d + (vocab + static_cast<double>(c.seq_len)) * d;
    const double ram = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
    if (ram > 0 && params * 16 > ram)
      throw std::invalid_argument("the model (--layers " + std::to_string(c.layers) + " --d-model " +
                                  std::to_string(c.d_model) + " --seq-len " + std::to_string(c.seq_len) + ": " +
                                  std::to_string(static_cast<int64_t>(params / 1e6)) + " M parameters) needs more " +
                                  "than this machine's " + std::to_string(static_cast<int64_t>(ram / (1 << 30))) +
                                  " GiB of memory");
  }
  finite_positive("comm-timeout", c.comm_timeout);
  if (c.checkpoint_activations > 0 && !reads("checkpoint-activations"))
    throw std::invalid_argument("--checkpoint-activations applies to the " + readers("checkpoint-activations") +
                                " model's blocks (got --model " + c.model + ")");
  if (!c.opt_level.empty() && c.opt_level != "O0" && c.opt_level != "O1" && c.opt_level != "O2" && c.opt_level != "O3")
    throw std::invalid_argument("--opt-level must be O0, O1, O2 or O3 (got '" + c.opt_level + "')");
  if (!c.weight_rounding.empty() && c.weight_rounding != "nearest" && c.weight_rounding != "stochastic")
    throw std::invalid_argument("--weight-rounding must be nearest or stochastic (got '" + c.weight_rounding + "')");
}

std::string config_to_json(const TrainConfig& c_in) {
  TrainConfig c = c_in;
  json j = json::object();
  for (const auto& k : config_keys(c))
    std::visit([&](auto* target) { j[k.key] = *target; }, k.target);
  return j.dump();
}

}  // namespace mantissa::train
