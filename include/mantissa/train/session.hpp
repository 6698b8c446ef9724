// Builds a whole training run from a TrainConfig: recipe (with overrides),
// model (with the recipe's precision policy), data, optimizer and trainer.
// Used by `mantissa train` / `mantissa eval` and by tests.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mantissa/recipe/recipe.hpp"
#include "mantissa/data/idx.hpp"
#include "mantissa/data/mlm.hpp"
#include "mantissa/data/text.hpp"
#include "mantissa/data/tokens.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/unit/config.hpp"
#include "mantissa/unit/rules.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/train/config.hpp"
#include "mantissa/train/run.hpp"
#include "mantissa/train/trainer.hpp"

namespace mantissa::train {

// --recipe / --opt-level, then --loss-scale & co., --weight-rounding and
// every --set key=value. Throws std::invalid_argument naming the flag.
recipe::Recipe resolve_recipe(const TrainConfig& c);

// ---- unit scaling (recipe::Parametrisation::unit) -----------------------------------
// What a unit-scaled recipe changes in a training run besides the model:
// u-muP learning-rate multipliers per parameter (optim/unit_lr.hpp),
// independent weight decay (optim/independent_decay.hpp), and the model's
// unit settings from `--set unit.KEY=VALUE` (unit/settings.hpp).

// Default base learning rate of unit-scaled models with Adam/AdamW, used when
// --lr is left at its default. With the u-muP multipliers the hidden weights
// move at lr/sqrt(depth x fan_in) per step (2^-6 relative at 2^-1 on the
// reference GPT, the standard model's 1e-3/0.02 is 2^-4.3), so the optimum is
// near u-muP's ~2^0. Sweep: docs/unit-scaling.md.
inline constexpr double kUnitDefaultLr = 0x1p-1;
// The same for u-muP models (umup-fp32, umup-fp8): 2^0, the best rate of
// umup-fp32 at d_model 64, 128, 256 and 512 alike in `experiment --preset
// transfer` (docs/unit-scaling.md).
inline constexpr double kUmupDefaultLr = 0x1p0;
// The default base rate of unit-scaled recipes on this model kind: the
// model's own (nn::ModelKind::unit_lr) when it sets one, else kUnitDefaultLr.
double unit_default_lr(const std::string& model);

// Gradient-norm clipping when --grad-clip is left at its default: 1 for
// standard models; off for unit-scaled ones, whose global gradient norm is
// ~1e5 in unit scale, so clipping at 1 rescales every step by a varying
// factor and Adam loses the shrinking gradient of late training. Measured
// on the reference GPT, 350 steps: unit-fp32 3.204 val bpc clipped, 3.018
// unclipped, fp32 (clipped at 1) 2.971 (docs/unit-scaling.md).
inline constexpr double kStandardGradClip = 1.0;
inline constexpr double kUnitGradClip = 0.0;

// The model's unit settings for this run: enabled by the recipe's
// parametrisation, adjusted by --set unit.KEY=VALUE.
unit::UnitConfig unit_config(const TrainConfig& c, const recipe::Recipe& recipe);

// Applies the recipe's precision policy to a model run without a Trainer
// (analysis); a Trainer's amp::Amp applies it itself.
void apply_precision(nn::Model& model, const recipe::Recipe& recipe);

// A model from its kind and the size flags, or from a saved config.json.
std::unique_ptr<nn::Model> make_model(const TrainConfig& c);  // standard parametrisation
std::unique_ptr<nn::Model> make_model(const TrainConfig& c, const unit::UnitConfig& unit);
std::unique_ptr<nn::Model> model_from_config(const std::string& kind, const std::string& config_json);

// The optimizer `mantissa train` uses for this model: c.optimizer with the
// recipe's state format; unit-scaled models get the u-muP per-parameter LR
// multipliers and weight decay independent of them (optim::IndependentDecay).
// owned non-empty: built with that share of the state only (sharded).
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, nn::Model& model, const recipe::Recipe& recipe,
                                                 const optim::OwnedRanges& owned = {});

// The default data of a model kind (gpt: austen.txt; mlp: the Fashion-MNIST
// directory), looked up in $MANTISSA_DATA, <repo>/.cache/data next to the
// binary, and ./.cache/data; never fetched implicitly: if missing, throws
// std::invalid_argument with the command to run.
std::string default_data_path(const std::string& model_kind);
// Refuses (std::invalid_argument naming the flag and path) an output that is
// not mantissa's own (--save: a checkpoint; --metrics: a metrics file), that
// would overwrite an input (--data, --config), or that cannot be written.
void check_outputs(const TrainConfig& c, const std::string& data_path);

// A run's loaded data, by the model's task: token ids (with the model's
// vocabulary) or byte text for text models, a classification set's training
// split and, for evaluation, its test split.
struct RunData {
  std::shared_ptr<const data::TokenCorpus> tokens;
  int64_t vocab = 0;  // token ids only
  const data::TextCorpus* corpus = nullptr;
  const data::ClassificationSet* train_set = nullptr;
  const data::ClassificationSet* test_set = nullptr;
  bool evaluation = true;  // false: the training source only (one batch for an analysis)
  data::MlmTokens mlm = {};  // masked text models: the special ids (data::mlm_tokens)
};
struct DataSources {
  std::unique_ptr<data::TrainSource> train;
  std::unique_ptr<data::EvalSource> val;
};
// The batch sources a run draws from, chosen by task: windows of the token
// ids or of the text, masked-LM rows of the text (masked text models),
// shuffled examples of the training split and the test split in order.
// Throws std::invalid_argument when --batch-size exceeds the training split.
DataSources data_sources(const TrainConfig& c, const RunData& d);

struct Session {
  TrainConfig config;
  recipe::Recipe recipe;
  std::string data_path;
  std::unique_ptr<nn::Model> model;
  std::unique_ptr<data::TextCorpus> corpus;            // gpt
  std::unique_ptr<data::ClassificationSet> train_set;  // mlp
  std::unique_ptr<data::ClassificationSet> test_set;   // mlp
  std::unique_ptr<data::TrainSource> train;
  std::unique_ptr<data::EvalSource> val;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<Trainer> trainer;
};

// --init-from DIR: sets c.model to the kind DIR's config.json holds and
// returns that config.json ("" without --init-from); refuses the flags that
// would size the model (the config does), --resume, a --model that disagrees,
// and a directory that is a link or holds no model. build_session calls it;
// the study calls it to plan its runs.
std::string resolve_init_from(TrainConfig& c);

// Validates, loads data, builds everything; with config.resume, loads the
// checkpoint (model configuration taken from it). Throws std::invalid_argument
// (exit code 2 in the CLI) for bad input.
std::unique_ptr<Session> build_session(const TrainConfig& config);

// The run `mantissa train` does with this session's settings: steps (up to
// stop_after more), evaluation/checkpoint cadence, metrics file (appended when
// resuming) headed by the run's config, recipe and model. Log goes to stdout,
// not as a terminal.
RunOptions run_options(Session& s);

}  // namespace mantissa::train
