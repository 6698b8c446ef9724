// Everything `mantissa train` can be told, as one struct, with a table of
// keys shared by the command line (--batch-size) and the JSON config file
// ("batch-size" or "batch_size"), so both accept exactly the same settings.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace mantissa::train {

// The model kind trained when none is named (nn::default_model_kind()).
std::string default_model_name();

struct TrainConfig {
  // Model.
  std::string model = default_model_name();  // gpt | llama | bert | mlp
  int64_t layers = 4;         // gpt: blocks; mlp: hidden layers
  int64_t d_model = 256;      // gpt: width; mlp: hidden width
  int64_t heads = 4;
  double dropout = 0.0;
  // Llama only (nn/llama.hpp).
  int64_t kv_heads = 0;         // grouped-query attention: kv heads (0: = heads)
  int64_t ffn_hidden = 0;       // SwiGLU width (0: the multiple of 64 nearest 8/3 d_model)
  bool tie_embeddings = false;  // output head = token embedding
  bool smooth_swiglu = false;   // per-channel scale on the SwiGLU product
  std::string norm;             // bert: "post" (default) or "pre" blocks; "": the model's default
  // gpt, llama on token data: the vocabulary (required from scratch, taken
  // from the checkpoint when resuming); 0 on byte-level text (256 bytes).
  int64_t vocab_size = 0;
  // Data. Empty data: the default corpus (gpt: Jane Austen; mlp: Fashion-MNIST);
  // a .bin file or a directory of them: token data (data/tokens.hpp).
  std::string data;
  int64_t batch_size = 16;
  int64_t seq_len = 128;
  int64_t grad_accum = 1;
  // Optimisation.
  int64_t steps = 1000;
  std::string optimizer = "adamw";
  double lr = 1e-3;
  double min_lr = -1;  // < 0: lr / 10
  int64_t warmup = 50;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.99;
  // < 0: automatic, 1 for standard models and off for unit-scaled ones
  // (their gradients are the loss gradient times per-parameter constants,
  // with a global norm ~1e5 on the reference GPT, so a loss-unit threshold
  // would normalise every step; see kUnitGradClip).
  double grad_clip = -1;
  int64_t seed = 1337;
  int64_t threads = 0;  // 0: the library default
  // Precision.
  std::string recipe = "fp32";
  std::string opt_level;          // O0..O3: replaces the recipe
  std::string loss_scale;         // "" (recipe's), "dynamic", "none" or a number (static)
  double init_scale = 0;          // > 0: overrides
  int64_t growth_interval = 0;    // > 0: overrides
  double growth_factor = 0;       // > 0: overrides
  double backoff_factor = 0;      // > 0: overrides
  double min_scale = -1;          // >= 0: overrides
  double max_scale = -1;          // >= 0: overrides
  std::string weight_rounding;    // "" (recipe's), nearest, stochastic
  std::vector<std::string> set;   // "key=value" recipe overrides
  bool grad_stats = false;
  // Data parallel (under mpirun; --batch-size is then the global batch).
  std::string comm_format = "fp32";  // gradient wire format: fp32, bf16, fp8, fp8-e4m3, fp8-e5m2
  int64_t comm_block = 128;          // fp8: values per power-of-two scale
  bool comm_error_feedback = false;  // carry what the wire format dropped into the next step
  double comm_timeout = 300;         // seconds a collective may wait before the job stops
  bool shard_optimizer = false;      // ZeRO stage 1: optimizer state and masters split across ranks
  // Memory.
  int64_t checkpoint_activations = 0;  // gpt: recompute every k-th block in backward (0: off)
  // Evaluation, logging, checkpoints.
  int64_t eval_every = 100;  // 0: only at the end
  int64_t eval_batches = 16;
  int64_t log_every = 10;
  std::string metrics;
  std::string save;
  int64_t save_every = 0;  // 0: only at the end
  std::string resume;
  std::string init_from;  // a model directory (mantissa's or Hugging Face's save_pretrained) to start from
  int64_t stop_after = 0;  // > 0: stop after this many steps in this invocation
  std::string config;  // the JSON file these came from (not a key in it)
};

// Models fed token windows of the text corpus (the language models).
bool text_model(const std::string& model);
// Whether the model trains on masked-LM batches of the corpus (data/mlm.hpp).
bool masked_text_model(const std::string& model);

// One setting: its key, help text and where it lives.
struct ConfigKey {
  std::string key;  // flag name without dashes, e.g. "batch-size"
  std::string help;
  std::variant<int64_t*, double*, std::string*, bool*, std::vector<std::string>*> target;
};
std::vector<ConfigKey> config_keys(TrainConfig& c);

// Applies a JSON config file's keys, skipping those in `given` (set on the
// command line, which wins). Throws std::invalid_argument naming the file
// and the key for an unknown key, a wrong type, or unparsable JSON.
void apply_config_file(TrainConfig& c, const std::string& path, const std::set<std::string>& given);

// Checks the value of a loss-scaling override key ("init-scale", ...) that
// was given (on the command line or in a file): it must be usable, since the
// unset value means "the recipe's". Other keys: no check.
void check_override(TrainConfig& c, const std::string& key);

// Checks sizes and names; throws std::invalid_argument naming the flag.
void validate(const TrainConfig& c);

// Every key with its value, as a JSON object (saved beside metrics and checkpoints).
std::string config_to_json(const TrainConfig& c);

}  // namespace mantissa::train
