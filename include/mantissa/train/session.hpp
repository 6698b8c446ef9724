// Builds a whole training run from a TrainConfig: recipe (with overrides),
// model (with the recipe's precision policy), data, optimizer and trainer.
// Used by `mantissa train` / `mantissa eval` and by tests.
#pragma once

#include <memory>
#include <string>

#include "mantissa/amp/recipe.hpp"
#include "mantissa/data/idx.hpp"
#include "mantissa/data/text.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/train/config.hpp"
#include "mantissa/train/trainer.hpp"

namespace mantissa::train {

// --recipe / --opt-level, then --loss-scale & co., --weight-rounding and
// every --set key=value. Throws std::invalid_argument naming the flag.
amp::Recipe resolve_recipe(const TrainConfig& c);

// Applies the recipe's precision policy to models that have one (GPT, MLP).
void apply_precision(nn::Model& model, const amp::Recipe& recipe);

// A model from its kind and the size flags, or from a saved config.json.
std::unique_ptr<nn::Model> make_model(const TrainConfig& c);
std::unique_ptr<nn::Model> model_from_config(const std::string& kind, const std::string& config_json);

// The default data of a model kind (gpt: austen.txt; mlp: the Fashion-MNIST
// directory), looked up in $MANTISSA_DATA, <repo>/.cache/data next to the
// binary, and ./.cache/data; runs scripts/data.sh when it can find it, else
// throws std::invalid_argument with the command to run.
std::string default_data_path(const std::string& model_kind);

struct Session {
  TrainConfig config;
  amp::Recipe recipe;
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

// Validates, loads data, builds everything; with config.resume, loads the
// checkpoint (model configuration taken from it). Throws std::invalid_argument
// (exit code 2 in the CLI) for bad input.
std::unique_ptr<Session> build_session(const TrainConfig& config);

}  // namespace mantissa::train
