#include "mantissa/train/session.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "mantissa/amp/amp.hpp"
#include "mantissa/data/mlm.hpp"
#include "mantissa/nn/bert.hpp"
#include "mantissa/data/tokens.hpp"
#include "mantissa/dist/group.hpp"
#include "mantissa/train/checkpoint.hpp"
#include "mantissa/train/finite.hpp"
#include "mantissa/formats/parse_number.hpp"
#include "mantissa/io/untrusted.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/nn/tasks.hpp"
#include "mantissa/optim/independent_decay.hpp"
#include "mantissa/optim/unit_lr.hpp"
#include "mantissa/train/rank_agreement.hpp"
#include "mantissa/train/run.hpp"
#include "mantissa/unit/settings.hpp"

namespace mantissa::train {

namespace fs = std::filesystem;

recipe::Recipe resolve_recipe(const TrainConfig& c) {
  recipe::Recipe r = c.opt_level.empty() ? recipe::find_recipe(c.recipe) : recipe::recipe_for_opt_level(c.opt_level);
  auto& ls = r.loss_scale;
  if (!c.loss_scale.empty()) {
    if (c.loss_scale == "dynamic") ls.method = recipe::ScalingMethod::dynamic;
    else if (c.loss_scale == "none") ls.method = recipe::ScalingMethod::none;
    else {
      double s = 0;
      if (!formats::parse_finite(c.loss_scale, s) || !(s > 0))
        throw std::invalid_argument("--loss-scale must be dynamic, none or a positive number (got '" +
                                    io::excerpt(c.loss_scale) + "')");
      ls.method = recipe::ScalingMethod::static_scale;
      ls.init_scale = s;
    }
  }
  if (c.init_scale > 0) ls.init_scale = c.init_scale;
  if (c.growth_interval > 0) ls.growth_interval = c.growth_interval;
  if (c.growth_factor > 0) ls.growth_factor = c.growth_factor;
  if (c.backoff_factor > 0) ls.backoff_factor = c.backoff_factor;
  if (c.min_scale >= 0) ls.min_scale = c.min_scale;
  if (c.max_scale >= 0) ls.max_scale = c.max_scale;
  if (!c.weight_rounding.empty()) recipe::set_recipe_field(r, "weight_rounding", c.weight_rounding);
  unit::UnitConfig ignored;  // unit.* keys configure the model, not the recipe
  for (const std::string& kv : unit::take_settings(c.set, ignored)) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("--set expects key=value (got '" + kv + "')");
    recipe::set_recipe_field(r, kv.substr(0, eq), kv.substr(eq + 1));
  }
  try {
    recipe::validate_recipe(r);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--recipe: ") + e.what());
  }
  return r;
}

void apply_precision(nn::Model& model, const recipe::Recipe& recipe) {
  model.set_precision(amp::precision_policy(recipe, &model));
}

unit::UnitConfig unit_config(const TrainConfig& c, const recipe::Recipe& recipe) {
  unit::UnitConfig u;
  unit::take_settings(c.set, u);
  u.enabled = recipe::unit_scaled(recipe.parametrisation);
  u.umup = recipe.parametrisation == recipe::Parametrisation::umup;
  const nn::ModelKind* kind = nn::find_model_kind(c.model);
  if (u.umup && !(kind && kind->umup))
    throw std::invalid_argument("--recipe " + recipe.name + ": the u-muP parametrisation is implemented for " +
                                nn::model_kind_titles([](const nn::ModelKind& k) { return k.umup; }) + ", not for " +
                                c.model);
  return u;
}

std::unique_ptr<nn::Model> make_model(const TrainConfig& c) { return make_model(c, unit::UnitConfig{}); }

std::unique_ptr<nn::Model> make_model(const TrainConfig& c, const unit::UnitConfig& unit) {
  const nn::ModelKind* kind = nn::find_model_kind(c.model);
  if (kind == nullptr) throw std::invalid_argument("--model must be " + nn::model_kind_names() + " (got '" + c.model + "')");
  nn::ModelSize s;
  s.vocab = c.vocab_size > 0 ? c.vocab_size : data::kByteVocab;
  s.context = c.seq_len;
  s.layers = c.layers;
  s.d_model = c.d_model;
  s.heads = c.heads;
  s.kv_heads = c.kv_heads;
  s.ffn_hidden = c.ffn_hidden;
  s.dropout = c.dropout;
  s.tie_embeddings = c.tie_embeddings;
  s.smooth_swiglu = c.smooth_swiglu;
  s.norm = c.norm;
  s.seed = static_cast<uint64_t>(c.seed);
  s.unit = unit;
  return kind->make(s);
}

std::unique_ptr<nn::Model> model_from_config(const std::string& kind, const std::string& config_json) {
  const nn::ModelKind* k = nn::find_model_kind(kind);
  if (k == nullptr) throw std::invalid_argument("unknown model kind '" + kind + "' in the checkpoint");
  return k->load(config_json);
}

namespace {

fs::path exe_dir() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : p.parent_path();
}

std::vector<fs::path> data_dirs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("MANTISSA_DATA"); env && *env) dirs.emplace_back(env);
  const fs::path exe = exe_dir();
  if (!exe.empty()) dirs.push_back(exe.parent_path() / ".cache" / "data");
  dirs.push_back(fs::current_path() / ".cache" / "data");
  return dirs;
}

std::string find_in(const std::vector<fs::path>& dirs, const std::string& name) {
  for (const auto& d : dirs) {
    std::error_code ec;
    if (fs::exists(d / name, ec)) return (d / name).string();
  }
  return {};
}

}  // namespace

std::string default_data_path(const std::string& kind) {
  const nn::ModelKind* k = nn::find_model_kind(kind);
  const std::string name = (k ? nn::task_info(k->task) : nn::task_info(nn::Task::language_model)).default_data;
  const std::vector<fs::path> dirs = data_dirs();
  if (std::string p = find_in(dirs, name); !p.empty()) {
    io::require_utf8(p, "default data path");
    return p;
  }
  // Never fetched implicitly: running a script found on disk would run
  // whatever the current directory holds.
  std::string looked;
  for (const fs::path& d : dirs) looked += (looked.empty() ? "" : ", ") + d.string();
  const fs::path exe = exe_dir();
  const fs::path script = exe.empty() ? fs::path() : exe.parent_path() / "scripts" / "data.sh";
  std::error_code ec;
  const std::string fetch = !script.empty() && fs::is_regular_file(script, ec)
                                ? "`bash " + script.string() + "`"
                                : "`bash scripts/data.sh` in the mantissa repository";
  throw std::invalid_argument("default data " + name + " not found in " + looked + ": fetch it with " + fetch +
                              ", set MANTISSA_DATA to the directory holding it, or pass --data PATH");
}

void check_outputs(const TrainConfig& c, const std::string& data_path) {
  const std::vector<std::pair<std::string, std::string>> inputs = {{"--data", data_path}, {"--config", c.config}};
  if (!c.save.empty()) {
    io::refuse_output_over_input(c.save, "--save", inputs);
    train::check_checkpoint_target(c.save, "--save");
  }
  if (!c.metrics.empty()) {
    io::refuse_output_over_input(c.metrics, "--metrics", inputs);
    if (!c.resume.empty()) io::refuse_output_over_input(c.metrics, "--metrics", {{"--resume", c.resume}});
    io::check_replaceable_file(c.metrics, kMetricsSignature, "--metrics");
    io::check_writable_directory(fs::path(c.metrics).parent_path().string(), "--metrics");
  }
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, nn::Model& model, const recipe::Recipe& recipe,
                                                 const optim::OwnedRanges& owned) {
  optim::OptimizerConfig oc;
  oc.owned = owned;
  oc.type = c.optimizer;
  oc.beta1 = c.beta1;
  oc.beta2 = c.beta2;
  oc.weight_decay = c.weight_decay;
  oc.state_format = recipe.optimizer_state_format.value();
  if (c.optimizer == "sgd") oc.momentum = c.beta1;
  if (!model.unit().enabled) return optim::make_optimizer(oc, model.parameters());
  // u-muP: per-parameter LR rules, and weight decay that does not follow them.
  oc.weight_decay = 0;
  auto inner = optim::make_optimizer(oc, model.parameters());
  optim::set_unit_lr_multipliers(model, *inner, c.optimizer);
  // Per-step decay independent of the LR: what the standard model gets at
  // its default learning rate (weight_decay x 1e-3), following the schedule.
  auto outer = std::make_unique<optim::IndependentDecay>(std::move(inner), c.lr, c.weight_decay * TrainConfig{}.lr);
  if (!owned.empty()) outer->shard(owned);
  return outer;
}

double unit_default_lr(const std::string& model) {
  const nn::ModelKind* kind = nn::find_model_kind(model);
  return kind && kind->unit_lr > 0 ? kind->unit_lr : kUnitDefaultLr;
}

namespace {

// Token data is refused for masked LMs built here (byte-level: their
// batches need a tokenizer's special ids, which --init-from DIR names) and
// needs the vocabulary given for a model built here: the ids alone do not
// say it (GPT-2's 50257 tokens are often padded to 50304).
void check_token_run(const TrainConfig& c, const data::TokenCorpus& tokens) {
  if (train::masked_text_model(c.model) && c.resume.empty() && c.init_from.empty())
    throw std::invalid_argument("--model " + c.model + " on token data (--data " + c.data +
                                "): a masked LM built here is byte-level; train it on byte-level text, or start from "
                                "a transformers directory holding its tokenizer.json (--init-from DIR)");
  if (c.resume.empty() && c.init_from.empty() && c.vocab_size == 0)
    throw std::invalid_argument("--data " + c.data + " holds token ids (largest " + std::to_string(tokens.max_id()) +
                                "): give the model's vocabulary with --vocab-size N (at least " +
                                std::to_string(int64_t{tokens.max_id()} + 1) + "; GPT-2's tokenizer has 50257)");
}

// What data-parallel ranks must agree on: every setting but the per-host
// ones (threads, where the files are), then what the data, model and recipe
// became.
std::vector<std::pair<std::string, std::string>> agreement_parts(const Session& s, const data::TokenCorpus* tokens) {
  std::vector<std::pair<std::string, std::string>> parts;
  const nlohmann::json settings = nlohmann::json::parse(config_to_json(s.config));
  for (auto it = settings.begin(); it != settings.end(); ++it)
    if (it.key() != "threads" && it.key() != "config" && it.key() != "data")
      parts.emplace_back("--" + it.key(), it.value().dump());
  std::string data;
  if (tokens)
    for (const data::TokenSpan& split : {tokens->train(), tokens->val()})
      data += std::to_string(split.size) + " tokens, crc " +
              std::to_string(io::crc32(split.data, static_cast<size_t>(split.size * split.width))) + "; ";
  else if (s.corpus)
    data = std::to_string(s.corpus->size()) + " bytes, crc " +
           std::to_string(io::crc32(s.corpus->train_bytes(), static_cast<size_t>(s.corpus->size())));
  else
    for (const data::ClassificationSet* set : {s.train_set.get(), s.test_set.get()})
      data += std::to_string(set->size()) + " examples, crc " +
              std::to_string(io::crc32(set->pixels.data(), set->pixels.size(),
                                       io::crc32(set->labels.data(), set->labels.size() * sizeof(int32_t)))) + "; ";
  parts.emplace_back("the training data (--data)", data);
  parts.emplace_back("the model configuration", s.model->config_json());
  parts.emplace_back("the recipe", recipe::recipe_to_json(s.recipe));
  return parts;
}

// The directory `flag` names, or the checkpoint its last save replaced when
// it is corrupt (said on stderr); model_dir_ok: a saved model will do.
std::string chosen_directory(const std::string& flag, const std::string& dir, bool model_dir_ok) {
  train::CheckpointChoice chosen;
  try {
    chosen = train::choose_checkpoint(dir, model_dir_ok);
  } catch (const io::FormatError& e) {
    throw std::invalid_argument(flag + " " + dir + ": " + e.what());
  }
  if (!chosen.warning.empty()) std::fprintf(stderr, "%s\n", chosen.warning.c_str());
  return chosen.dir;
}

}  // namespace

// The model kind and every setting of its shape come from DIR's config.json,
// so flags that would size the model are refused rather than ignored.
// --dropout stays the run's: it replaces the config's rates.
std::string resolve_init_from(TrainConfig& c) {
  if (c.init_from.empty()) return "";
  if (!c.resume.empty())
    throw std::invalid_argument("--init-from and --resume exclude each other: --resume continues a run (its optimizer "
                                "state and step), --init-from starts a new run from a model's weights");
  const TrainConfig d;
  const std::pair<const char*, bool> shape[] = {
      {"layers", c.layers != d.layers},          {"d-model", c.d_model != d.d_model},
      {"heads", c.heads != d.heads},             {"kv-heads", c.kv_heads != d.kv_heads},
      {"ffn-hidden", c.ffn_hidden != d.ffn_hidden}, {"tie-embeddings", c.tie_embeddings != d.tie_embeddings},
      {"smooth-swiglu", c.smooth_swiglu != d.smooth_swiglu}, {"norm", !c.norm.empty()},
      {"vocab-size", c.vocab_size != d.vocab_size}};
  for (const auto& [flag, given] : shape)
    if (given)
      throw std::invalid_argument(std::string("--") + flag + " does not apply with --init-from: the model is " +
                                  c.init_from + "'s config.json");
  c.init_from = chosen_directory("--init-from", c.init_from, true);
  std::string cfg;
  try {
    cfg = train::read_model_config(c.init_from);
  } catch (const io::FormatError& e) {
    throw std::invalid_argument("--init-from " + c.init_from + ": " + e.what());
  }
  const std::string kind = nn::detect_model_kind(cfg);
  if (kind.empty())
    throw std::invalid_argument("--init-from " + c.init_from + ": config.json is not one of a " +
                                nn::model_kind_names() + " model");
  if (c.model != d.model && c.model != kind)
    throw std::invalid_argument("--model " + c.model + " disagrees with --init-from " + c.init_from +
                                ", which holds a " + kind + " model");
  c.model = kind;
  return cfg;
}

namespace {

// Dropout is a setting of the run, not of the weights: --dropout (default 0)
// replaces the rates of the config.json a run starts from, said on stderr
// when they differ.
void set_run_dropout(const TrainConfig& c, const std::string& config_json, nn::Model& model) {
  const nlohmann::json j = nlohmann::json::parse(config_json);
  std::string replaced;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key().find("drop") != std::string::npos && it.value().is_number() && it.value().get<double>() != c.dropout)
      replaced += (replaced.empty() ? "" : ", ") + it.key() + " " + it.value().dump();
  if (!replaced.empty())
    std::fprintf(stderr, "mantissa: note: --dropout %g replaces %s of %s/config.json\n", c.dropout, replaced.c_str(),
                 c.init_from.c_str());
  model.set_dropout(static_cast<float>(c.dropout));
}

// The recipe's parametrisation must be the one the loaded model was built with.
void check_parametrisation(const std::string& flag, const std::string& dir, const nn::Model& model,
                           const recipe::Recipe& r, const unit::UnitConfig& unit) {
  if (model.unit().enabled != unit.enabled)
    throw std::invalid_argument(flag + " " + dir + ": the checkpoint holds a " +
                                (model.unit().enabled ? "unit-scaled" : "standard") + " model but recipe " + r.name +
                                " wants the " + (unit.enabled ? "unit" : "standard") + " parametrisation");
  if (model.unit().umup != unit.umup)
    throw std::invalid_argument(flag + " " + dir + ": the checkpoint holds a " +
                                (unit.umup ? "unit-scaled (not u-muP)" : "u-muP") + " model but recipe " + r.name +
                                " wants the " + (unit.umup ? "u-muP" : "unit") + " parametrisation");
}

// A text model's data (token ids, returned, or the byte text, kept in s),
// checked against --seq-len and --vocab-size; nothing for other models.
std::shared_ptr<const data::TokenCorpus> load_text(Session& s) {
  const TrainConfig& c = s.config;
  if (!train::text_model(c.model)) return nullptr;
  if (data::is_token_data(s.data_path)) {
    auto tokens = std::make_shared<const data::TokenCorpus>(data::TokenCorpus::load(s.data_path));
    tokens->check_seq_len(c.seq_len);
    check_token_run(c, *tokens);
    return tokens;
  }
  if (c.vocab_size != 0)
    throw std::invalid_argument("--vocab-size applies to token data (a .bin file or a directory of them); --data " +
                                s.data_path + " is byte-level text, whose vocabulary is the 256 byte values");
  s.corpus = std::make_unique<data::TextCorpus>(data::TextCorpus::load(s.data_path));
  s.corpus->check_seq_len(c.seq_len);
  return nullptr;
}

// The run's model: a resumed run takes its configuration from the
// checkpoint (so the size flags cannot silently disagree with the saved
// weights), --init-from from init_config with its weights; else built from
// the flags. Resolves c.resume to the checkpoint chosen.
std::unique_ptr<nn::Model> build_model(TrainConfig& c, const std::string& init_config, const recipe::Recipe& recipe,
                                       const unit::UnitConfig& unit) {
  std::unique_ptr<nn::Model> model;
  if (!c.resume.empty()) {
    c.resume = chosen_directory("--resume", c.resume, false);
    const std::string cfg = train::read_model_config(c.resume);
    model = model_from_config(c.model, cfg);
    check_parametrisation("--resume", c.resume, *model, recipe, unit);
  } else if (!c.init_from.empty()) {
    try {
      model = model_from_config(c.model, nn::bert_config_with_special_ids(init_config, c.init_from));
      check_parametrisation("--init-from", c.init_from, *model, recipe, unit);
      if (nn::find_model_kind(c.model)->reads("dropout")) set_run_dropout(c, init_config, *model);
      train::load_model_weights(c.init_from, *model);
    } catch (const io::FormatError& e) {
      throw std::invalid_argument("--init-from " + c.init_from + ": " + e.what());
    }
    for (autograd::Parameter* p : model->parameters())
      if (!train::all_finite(p->value))
        throw std::invalid_argument("--init-from " + c.init_from + ": weight " + p->name +
                                    " holds non-finite values (NaN or infinity)");
  } else {
    model = make_model(c, unit);
  }
  if (const std::string why = model->cannot_train(); !why.empty())
    throw std::invalid_argument((c.init_from.empty() ? "" : "--init-from " + c.init_from + ": ") + why);
  return model;
}

// The trainer's settings from the flags; sets the group's timeout.
TrainerOptions trainer_options(const TrainConfig& c, const dist::CommOptions& comm, dist::Group& group) {
  TrainerOptions to;
  to.grad_accum = c.grad_accum;
  to.schedule.max_lr = c.lr;
  to.schedule.min_lr = c.min_lr;
  to.schedule.warmup_steps = c.warmup;
  to.schedule.decay_steps = c.steps;
  to.amp.grad_clip = c.grad_clip;
  to.amp.seed = static_cast<uint64_t>(c.seed);
  to.amp.grad_stats = c.grad_stats;
  to.comm = comm;
  to.shard_optimizer = c.shard_optimizer;
  to.group = &group;
  to.group->set_timeout(c.comm_timeout);
  return to;
}

}  // namespace

DataSources data_sources(const TrainConfig& c, const RunData& d) {
  DataSources s;
  const auto seed = static_cast<uint64_t>(c.seed);
  if (d.tokens && train::masked_text_model(c.model)) {
    s.train = std::make_unique<data::MlmBatches>(d.tokens, c.batch_size, c.seq_len, seed, d.mlm);
    if (d.evaluation)
      s.val = std::make_unique<data::MlmValidation>(*d.tokens, c.batch_size, c.seq_len, c.eval_batches, d.mlm);
  } else if (d.tokens) {
    s.train = std::make_unique<data::TextWindows>(d.tokens, d.vocab, c.batch_size, c.seq_len, seed);
    if (d.evaluation)
      s.val = std::make_unique<data::TextValidation>(d.tokens, d.vocab, c.batch_size, c.seq_len, c.eval_batches);
  } else if (d.corpus && train::masked_text_model(c.model)) {
    s.train = std::make_unique<data::MlmBatches>(*d.corpus, c.batch_size, c.seq_len, seed, d.mlm);
    if (d.evaluation)
      s.val = std::make_unique<data::MlmValidation>(*d.corpus, c.batch_size, c.seq_len, c.eval_batches, d.mlm);
  } else if (d.corpus) {
    s.train = std::make_unique<data::TextWindows>(*d.corpus, c.batch_size, c.seq_len, seed);
    if (d.evaluation)
      s.val = std::make_unique<data::TextValidation>(*d.corpus, c.batch_size, c.seq_len, c.eval_batches);
  } else if (d.train_set) {
    if (c.batch_size > d.train_set->size())
      throw std::invalid_argument("--batch-size " + std::to_string(c.batch_size) + " exceeds the " +
                                  std::to_string(d.train_set->size()) + " training examples");
    s.train = std::make_unique<data::ShuffledBatches>(*d.train_set, c.batch_size, seed);
    if (d.evaluation) s.val = std::make_unique<data::SequentialBatches>(*d.test_set, c.batch_size);
  } else {
    throw std::logic_error("data_sources: no data given");
  }
  return s;
}

std::unique_ptr<Session> build_session(const TrainConfig& config) {
  auto s = std::make_unique<Session>();
  s->config = config;
  TrainConfig& c = s->config;
  const std::string init_config = resolve_init_from(c);
  validate(c);
  // Outputs are checked before anything is built, so a refused path costs
  // no training and no file is touched.
  s->data_path = c.data.empty() ? default_data_path(c.model) : c.data;
  check_outputs(c, s->data_path);
  if (c.min_lr < 0) c.min_lr = c.lr / 10;
  s->recipe = resolve_recipe(c);
  const unit::UnitConfig unit = unit_config(c, s->recipe);
  if (unit.enabled && c.lr == TrainConfig{}.lr && c.optimizer != "sgd") {
    // --lr left at its default: the unit default (the standard one is ~8x too small for unit models).
    c.lr = unit.umup ? kUmupDefaultLr : unit_default_lr(c.model);
    if (config.min_lr < 0) c.min_lr = c.lr / 10;
  }
  if (c.grad_clip < 0) c.grad_clip = unit.enabled ? kUnitGradClip : kStandardGradClip;
  if (c.threads > 0) kernels::set_num_threads(c.threads);

  // The data first: a sequence length the corpus cannot fill is reported
  // before memory is spent on the model.
  const std::shared_ptr<const data::TokenCorpus> tokens = load_text(*s);

  s->model = build_model(c, init_config, s->recipe, unit);
  // The precision policy is the Trainer's (amp::Amp sets it once).

  const int64_t vocab = tokens ? data::model_vocab(*s->model) : 0;
  if (train::text_model(c.model)) {
    const int64_t context = s->model->context_length();
    if (c.seq_len > context)
      throw std::invalid_argument("--seq-len " + std::to_string(c.seq_len) + " exceeds the model's context " +
                                  std::to_string(context));
    if (tokens && c.vocab_size > 0 && c.vocab_size != vocab)
      throw std::invalid_argument("--vocab-size " + std::to_string(c.vocab_size) +
                                  " disagrees with the checkpoint's vocabulary " + std::to_string(vocab) +
                                  " (--resume " + c.resume + ")");
  } else {
    s->train_set = std::make_unique<data::ClassificationSet>(data::load_fashion_mnist(s->data_path, "train"));
    s->test_set = std::make_unique<data::ClassificationSet>(data::load_fashion_mnist(s->data_path, "test"));
  }
  RunData run_data;
  run_data.tokens = tokens;
  run_data.vocab = vocab;
  run_data.corpus = s->corpus.get();
  run_data.train_set = s->train_set.get();
  run_data.test_set = s->test_set.get();
  if (train::masked_text_model(c.model)) run_data.mlm = data::mlm_tokens(*s->model, tokens != nullptr);
  DataSources sources = data_sources(c, run_data);
  s->train = std::move(sources.train);
  s->val = std::move(sources.val);

  // Sharded: the optimizer holds this rank's share of the state from the start.
  const dist::CommOptions comm{c.comm_format, c.comm_block, c.comm_error_feedback};
  dist::validate(comm);
  dist::Group& group = dist::Group::world();
  if (group.distributed()) require_rank_agreement(group, agreement_parts(*s, tokens.get()));
  try {
    s->optimizer = make_optimizer(c, *s->model, s->recipe,
                                  c.shard_optimizer && group.distributed()
                                      ? dist::shard_ranges(group, s->model->parameters(), comm)
                                      : optim::OwnedRanges{});
  } catch (const std::invalid_argument& e) {
    if (!c.shard_optimizer) throw;
    throw std::invalid_argument(std::string("--shard-optimizer: ") + e.what());
  }

  TrainerOptions to = trainer_options(c, comm, group);
  if (c.shard_optimizer && !to.group->distributed())
    std::fprintf(stderr, "mantissa: note: --shard-optimizer has nothing to share in one process (launch with mpirun)\n");
  if (c.batch_size % to.group->size() != 0)
    throw std::invalid_argument("--batch-size " + std::to_string(c.batch_size) + " does not split evenly across " +
                                std::to_string(to.group->size()) + " data-parallel ranks");
  // The model already honours the parametrisation; amp::Amp only handles precision.
  s->trainer = std::make_unique<Trainer>(*s->model, *s->optimizer, *s->train, s->val.get(), s->recipe, to);
  if (!c.resume.empty()) {
    s->trainer->resume(c.resume);
    if (c.steps < s->trainer->step())
      throw std::invalid_argument("--steps " + std::to_string(c.steps) + " is below the checkpoint's step " +
                                  std::to_string(s->trainer->step()) + " (--steps counts all steps, also when resuming)");
  }
  return s;
}

namespace {

// What one target of the run's data is: the metrics report per token, per
// byte (bits per character) or per example.
std::string data_unit(const Session& s) {
  if (s.val && s.val->per_token()) return "token";
  return s.corpus ? "byte" : "example";
}

}  // namespace

RunOptions run_options(Session& s) {
  const TrainConfig& c = s.config;
  RunOptions ro;
  ro.steps = c.stop_after > 0 ? std::min(c.steps, s.trainer->step() + c.stop_after) : c.steps;
  ro.eval_every = c.eval_every;
  ro.save_every = c.save_every;
  ro.save_dir = c.save;
  ro.metrics_path = c.metrics;
  ro.append_metrics = !c.resume.empty();
  ro.log_every = c.log_every;
  ro.per_token = data_unit(s) == "token";
  ro.run_info_json = nlohmann::json{{"config", nlohmann::json::parse(config_to_json(c))},
                                    {"recipe", nlohmann::json::parse(recipe::recipe_to_json(s.recipe))},
                                    {"model", nlohmann::json::parse(s.model->config_json())},
                                    {"parameters", s.model->parameter_count()},
                                    {"resumed_at", s.trainer->step()},
                                    {"data", {{"path", s.data_path}, {"unit", data_unit(s)}}}}
                         .dump();
  return ro;
}

}  // namespace mantissa::train
