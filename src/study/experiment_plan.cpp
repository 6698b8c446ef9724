// Presets of the recipe study and the list of runs they expand into.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mantissa/data/tokens.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/nn/tasks.hpp"
#include "mantissa/recipe/recipe.hpp"
#include "mantissa/study/experiment.hpp"
#include "mantissa/io/untrusted.hpp"
#include "mantissa/train/session.hpp"

namespace mantissa::study {

namespace {

// Every recipe the study knows to ask for, in table order. Names that are not
// registered at run time are reported as "not available".
const std::vector<std::string> kQuickRecipes = {
    "fp32",        "bf16-amp",     "fp16-amp",    "fp16-amp-noscale", "fp16-pure",           "unit-fp32",
    "unit-fp16",   "unit-fp8",     "fp8-noscale", "fp8-current",      "fp8-delayed",         "mxfp8",
    "fp8-blockwise", "scalify-fp16", "scalify-fp16-master", "scalify-fp8", "scalify-fp8-fp16state"};
const std::vector<std::string> kPaperRecipes = {
    "fp32",      "bf16-amp",  "fp16-amp",  "fp16-amp-noscale", "fp16-pure",   "bf16-pure",
    "fp16-master", "bf16-master-sr", "unit-fp32", "unit-bf16", "unit-fp16", "unit-fp8",
    "fp8-noscale", "fp8-current", "fp8-delayed", "mxfp8",   "fp8-blockwise", "scalify-fp16",
    "scalify-fp16-master", "scalify-fp8", "scalify-fp8-fp16state"};
// The FP4 ablation: the references, the 4-bit recipes, and nvfp4 with one
// ingredient removed each ("recipe/key=value" runs the recipe with that --set).
const std::vector<std::string> kFp4Recipes = {
    "bf16-amp", "fp8-delayed", "mxfp8", "nvfp4", "mxfp4", "mxfp4-fwd", "nvfp4-naive", "mxfp4-naive",
    "nvfp4/rht=none", "nvfp4/fp4_sr=none", "nvfp4/fp4_weight_2d=false", "nvfp4/bf16_layers=none",
    "nvfp4/rht=deterministic", "nvfp4/fp4_until=0.9"};
// Hyperparameter transfer across width: the standard model against u-muP.
const std::vector<std::string> kTransferRecipes = {"fp32", "umup-fp32"};
const std::vector<std::string> kMlpRecipes = {"fp32", "bf16-amp", "fp16-amp-noscale", "unit-fp8", "scalify-fp8"};

// Learning rates: standard 2^-10; unit: each task's model's own (unit_default_lr: the
// library's 2^-1 unless the model sets one; the paper's 2^-6 undertrains these models,
// docs/unit-scaling.md).
constexpr double kLrStandard = 1.0 / 1024;

struct Preset {
  int64_t layers, d_model, heads, seq_len, batch, gpt_tokens, seeds, eval_batches;
  int64_t mlp_hidden_layers, mlp_width, mlp_batch, mlp_steps;
  const std::vector<std::string>* recipes;
  bool all_registered;  // also run registered recipes the list does not name
  std::string note;
  // A width study (transfer): the GPT at each d_model with heads of head_dim,
  // each recipe swept over its parametrisation's rates (--lr-sweep spec).
  std::vector<int64_t> widths = {};
  int64_t head_dim = 32;
  std::string sweep_standard = {}, sweep_unit = {};
};

Preset preset(const std::string& name) {
  if (name == "quick")
    return {2, 128, 4, 64, 16, 400 * 16 * 64, 1, 16, 2, 256, 128, 300, &kQuickRecipes, false,
            "The quick preset trains a smaller GPT than the reference one (which has 4 layers, d_model 256, T 128) "
            "with one seed and short runs, so that the whole study takes about 2 minutes on 2 idle cores (measured "
            "2026-11-24 and 25: 98 and 115 s wall, 194 and 227 CPU seconds for 17 GPT and 5 MLP runs; 7.4 minutes while other builds shared "
            "the cores): its numbers "
            "show which recipes track fp32 and which break, not converged quality. --preset paper runs the "
            "reference GPT with 3 seeds."};
  if (name == "paper")
    return {4, 256, 4, 128, 16, 350 * 16 * 128, 3, 16, 2, 256, 128, 2000, &kPaperRecipes, true,
            "The paper preset trains the reference GPT (4 layers, d_model 256, 4 heads, T 128, batch 16) with 3 "
            "seeds and every registered recipe: about 1.5 hours on 2 idle cores (estimated 2026-11-24 from a "
            "15-recipe, 1-seed run of the same GPT: 2,498 CPU seconds, so about 10,500 for 21 recipes x 3 seeds)."};
  if (name == "fp4")
    return {4, 256, 4, 128, 16, 350 * 16 * 128, 1, 16, 2, 256, 128, 0, &kFp4Recipes, false,
            "The fp4 preset trains the reference GPT (the paper preset's model and 350-step budget) with one seed "
            "under the FP4 recipes and nvfp4 with one ingredient removed each (recipe/key=value: the recipe with "
            "that setting)."};
  if (name == "transfer")
    return {2, 128, 4, 64, 16, 100 * 16 * 64, 1, 16, 0, 0, 0, 0, &kTransferRecipes, false,
            "The transfer preset trains a 2-block GPT (T 64, batch 16, heads of 32) at d_model 64, 128, 256 and 512 "
            "for 100 steps, sweeping the learning rate of the standard model (fp32) and of u-muP (umup-fp32): with "
            "u-muP the best rate should stay put as the width grows (hyperparameter transfer), with the standard "
            "parametrisation it moves. One seed and a short budget: the figures show where the minima sit, not "
            "converged quality.",
            {64, 128, 256, 512}, 32, "2^-13:2^-6:1", "2^-3:2^2:1"};
  throw std::invalid_argument("--preset must be quick, paper, fp4 or transfer (got '" + name + "')");
}

void check_positive(int64_t v, const char* flag) {
  if (v < 0) throw std::invalid_argument(std::string(flag) + " must be positive (got " + std::to_string(v) + ")");
}

std::vector<std::string> registered_names() {
  std::vector<std::string> n;
  for (const auto& r : recipe::recipes()) n.push_back(r.name);
  return n;
}

}  // namespace

std::vector<std::string> preset_names() { return {"quick", "paper", "fp4", "transfer"}; }

ExperimentPlan make_plan(const ExperimentOptions& o) {
  const Preset p = preset(o.preset);
  check_positive(o.seeds, "--seeds");
  check_positive(o.tokens, "--tokens");
  check_positive(o.layers, "--layers");
  check_positive(o.d_model, "--d-model");
  check_positive(o.heads, "--heads");
  check_positive(o.seq_len, "--seq-len");
  check_positive(o.batch_size, "--batch-size");
  check_positive(o.mlp_steps, "--mlp-steps");
  check_positive(o.threads, "--threads");
  if (o.lr_standard < 0 || o.lr_unit < 0 || !std::isfinite(o.lr_standard) || !std::isfinite(o.lr_unit))
    throw std::invalid_argument("--lr-standard and --lr-unit must be positive numbers");
  const std::vector<double> sweep = o.lr_sweep.empty() ? std::vector<double>{} : parse_lr_sweep(o.lr_sweep);
  std::vector<int64_t> widths = o.widths.empty() ? p.widths : o.widths;
  for (int64_t w : widths)
    if (w <= 0) throw std::invalid_argument("--widths must be positive (got " + std::to_string(w) + ")");
  if (!o.widths.empty() && o.d_model > 0) throw std::invalid_argument("--widths and --d-model cannot be combined");
  if (o.d_model > 0) widths.clear();  // one width, the given one
  if ((!sweep.empty() || !p.sweep_standard.empty()) && (o.lr_standard > 0 || o.lr_unit > 0))
    throw std::invalid_argument(std::string(sweep.empty() ? "--preset " + o.preset + " sweeps" : "--lr-sweep sets") +
                                " every GPT rate: it cannot be combined with --lr-standard or --lr-unit");
  if (o.out.empty()) throw std::invalid_argument("--out must name a directory");
  if (o.inspect_steps < 1) throw std::invalid_argument("--inspect-steps must be >= 1");
  if (!(o.inspect_gap_pct >= 0)) throw std::invalid_argument("--inspect-gap must be a number >= 0");
  // A name or width given twice would train twice under one run id.
  for (const auto& [flag, list] : {std::pair{"--recipes", &o.recipes}, std::pair{"--mlp-recipes", &o.mlp_recipes}})
    for (auto it = list->begin(); it != list->end(); ++it)
      if (std::find(list->begin(), it, *it) != it)
        throw std::invalid_argument(std::string(flag) + " names '" + io::excerpt(*it) + "' twice");
  for (auto it = o.widths.begin(); it != o.widths.end(); ++it)
    if (std::find(o.widths.begin(), it, *it) != it)
      throw std::invalid_argument("--widths names " + std::to_string(*it) + " twice");
  // Token data: the text task's tables and curves in nats per token.
  const bool token_data = !o.data.empty() && data::is_token_data(o.data);
  const bool fine_tune = !o.init_from.empty();
  if (fine_tune) {
    // The checkpoint's config.json sizes the model: a size flag would be ignored.
    const std::pair<const char*, bool> sized[] = {
        {"--layers", o.layers > 0}, {"--d-model", o.d_model > 0}, {"--heads", o.heads > 0},
        {"--widths", !o.widths.empty() || !p.widths.empty()}, {"--norm", !o.norm.empty()},
        {"--vocab-size", o.vocab_size > 0}, {"--lr-sweep", !sweep.empty() || !p.sweep_standard.empty()}};
    for (const auto& [flag, given] : sized)
      if (given)
        throw std::invalid_argument(std::string(flag) + (std::string(flag) == "--widths" && o.widths.empty()
                                                             ? " (of --preset " + o.preset + ")"
                                                             : "") +
                                    " does not apply with --init-from: the model is " + o.init_from +
                                    "'s config.json");
  } else if (token_data && o.vocab_size <= 0) {
    throw std::invalid_argument("--data " + o.data + " is token data: give the model's vocabulary with --vocab-size N, "
                                "or fine-tune a checkpoint with --init-from DIR");
  } else if (!token_data && o.vocab_size > 0) {
    throw std::invalid_argument("--vocab-size applies to token data; --data " +
                                (o.data.empty() ? std::string("(the default corpus)") : o.data) + " is byte text");
  }
  const std::vector<std::string> known = registered_names();
  for (const auto* list : {&o.recipes, &o.mlp_recipes})
    for (const auto& r : *list) {
      if (r.empty()) throw std::invalid_argument("--recipes: empty recipe name in the list");
      // A name the user asked for must exist ("none" turns the MLP off);
      // only the presets' lists may name recipes absent from this build.
      if (std::find(known.begin(), known.end(), r) == known.end() && !(list == &o.mlp_recipes && r == "none"))
        throw std::invalid_argument(std::string(list == &o.recipes ? "--recipes" : "--mlp-recipes") +
                                    ": unknown recipe '" + io::excerpt(r) + "' (`mantissa recipes` lists them)");
    }

  ExperimentPlan plan;
  plan.preset = o.preset;
  const int64_t seeds = o.seeds ? o.seeds : p.seeds;
  for (int64_t i = 0; i < seeds; ++i) plan.seeds.push_back(1337 + i);  // seed 1337 = `mantissa train`'s default

  // The text task: a causal LM (gpt, llama: rows labelled gpt) or BERT's masked LM (rows labelled bert),
  // named by its task (nn/tasks.hpp).
  TaskPlan gpt;
  train::TrainConfig& g = gpt.base;
  g.model = o.model;
  g.init_from = o.init_from;
  train::resolve_init_from(g);  // with --init-from: g.model becomes the checkpoint's kind
  const nn::ModelKind* kind = nn::find_model_kind(g.model);
  auto text = [](const nn::ModelKind& k) { return k.task != nn::Model::Task::classifier; };
  if (kind == nullptr || !text(*kind))
    throw std::invalid_argument("--model must be " + nn::model_kind_names(text) + " (got '" + o.model + "')");
  const bool masked = kind->task == nn::Model::Task::masked_language_model;
  const nn::TaskInfo& text_task = nn::task_info(kind->task, token_data);
  gpt.task = text_task.id;
  g.norm = o.norm;
  if (fine_tune)
    plan.notes.push_back("every run of the text task (rows labelled " + text_task.id + ") fine-tunes the " + g.model +
                         " model of " + o.init_from + " (its config.json gives the sizes; the same weights, the "
                         "same batches for every recipe)");
  else if (!masked && g.model != nn::default_model_kind(kind->task).name)
    plan.notes.push_back("the text task (rows labelled " + text_task.id + ") trains the " + g.model + " model");
  if (masked && !fine_tune)
    plan.notes.push_back("the text task trains " + g.model + " (" + std::string(o.norm == "pre" ? "pre" : "post") +
                         "-norm) on the masked-LM objective, the sizes below applying to it: its table gives the " +
                         (token_data ? "nats per masked token (the validation loss per masked token)"
                                     : "bits per masked character (the validation loss per masked byte / ln 2)") +
                         " and the masked-token accuracy");
  if (token_data)
    plan.notes.push_back("--data " + o.data + " is token data: the text task's validation loss is in nats per token, "
                         "and a run whose loss ends above ln V (guessing uniformly over its V ids) counts as "
                         "diverged");
  if (!fine_tune) {
    g.layers = o.layers ? o.layers : p.layers;
    g.d_model = o.d_model ? o.d_model : p.d_model;
    g.heads = o.heads ? o.heads : p.heads;
    g.vocab_size = o.vocab_size;
  }
  g.seq_len = o.seq_len ? o.seq_len : p.seq_len;
  g.batch_size = o.batch_size ? o.batch_size : p.batch;
  const int64_t tokens = o.tokens ? o.tokens : p.gpt_tokens;
  const int64_t per_step = g.batch_size * g.seq_len;
  if (o.tokens > 0 && o.tokens < per_step)
    throw std::invalid_argument("--tokens " + std::to_string(o.tokens) + " is less than one step (batch " +
                                std::to_string(g.batch_size) + " x seq-len " + std::to_string(g.seq_len) + " = " +
                                std::to_string(per_step) + " tokens)");
  g.steps = std::max<int64_t>(1, (tokens + per_step - 1) / per_step);
  g.warmup = std::min<int64_t>(50, g.steps / 10);
  g.eval_every = std::max<int64_t>(1, g.steps / 10);
  g.eval_batches = p.eval_batches;
  g.data = o.data;
  g.threads = o.threads;
  gpt.lr_standard = o.lr_standard > 0 ? o.lr_standard : kLrStandard;
  gpt.lr_unit = o.lr_unit > 0 ? o.lr_unit : train::unit_default_lr(g.model);
  gpt.recipes = o.recipes.empty() ? *p.recipes : o.recipes;
  if (o.recipes.empty() && p.all_registered)
    for (const auto& n : registered_names())
      if (std::find(gpt.recipes.begin(), gpt.recipes.end(), n) == gpt.recipes.end()) gpt.recipes.push_back(n);
  // Shapes that no run could train (d_model not a multiple of heads, sizes
  // out of range) are refused before the study starts.
  train::validate(g);
  plan.tasks.push_back(gpt);

  // A fine-tuning study is about its checkpoint: the MLP only when asked for.
  const bool no_mlp = (o.mlp_recipes.size() == 1 && o.mlp_recipes.front() == "none") ||
                      (o.mlp_recipes.empty() && (p.mlp_steps == 0 || fine_tune));
  if (!no_mlp) {
    TaskPlan mlp;
    mlp.task = nn::task_info(nn::Task::classifier).id;
    train::TrainConfig& m = mlp.base;
    m.model = nn::default_model_kind(nn::Task::classifier).name;
    m.layers = p.mlp_hidden_layers;
    m.d_model = p.mlp_width;
    m.batch_size = p.mlp_batch;
    m.steps = o.mlp_steps ? o.mlp_steps : p.mlp_steps;
    m.warmup = std::min<int64_t>(50, m.steps / 10);
    m.eval_every = std::max<int64_t>(1, m.steps / 10);
    m.data = o.mlp_data;
    m.threads = o.threads;
    mlp.lr_standard = kLrStandard;
    mlp.lr_unit = train::unit_default_lr(m.model);
    mlp.recipes = o.mlp_recipes.empty() ? kMlpRecipes : o.mlp_recipes;
    plan.tasks.push_back(mlp);
  }

  char sizes[160];
  if (fine_tune)
    std::snprintf(sizes, sizeof sizes, "the sizes of %s", io::excerpt(o.init_from).c_str());
  else
    std::snprintf(sizes, sizeof sizes, "%ld layers, d_model %ld, %ld heads", static_cast<long>(g.layers),
                  static_cast<long>(g.d_model), static_cast<long>(g.heads));
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s: %s, T %ld, batch %ld; %ld steps (%ld tokens) per run, %zu seed(s); "
                "AdamW, learning rate %g for standard and %g for unit-scaled recipes, warm-up %ld steps then cosine "
                "to a tenth.",
                text_task.model_title.c_str(), sizes,
                static_cast<long>(g.seq_len), static_cast<long>(g.batch_size), static_cast<long>(g.steps),
                static_cast<long>(g.steps * per_step), plan.seeds.size(), gpt.lr_standard, gpt.lr_unit,
                static_cast<long>(g.warmup));
  plan.notes.push_back(buf);
  if (!sweep.empty()) {
    std::string rates;
    for (double lr : sweep) rates += (rates.empty() ? "" : ", ") + report::lr_label(lr);
    plan.notes.push_back("Learning-rate sweep (--lr-sweep " + o.lr_sweep + "): every GPT recipe trained at each of " +
                         std::to_string(sweep.size()) + " rates (" + rates +
                         ") instead of the rates above, minimum rate a tenth of each; MLP recipes at their default rate.");
  }
  if (sweep.empty() && !p.sweep_standard.empty())
    plan.notes.push_back("Learning rates swept per parametrisation: standard recipes " + p.sweep_standard +
                         ", unit-scaled ones " + p.sweep_unit + " (START:STOP:STEP, step in octaves); minimum rate a "
                         "tenth of each.");
  if (!widths.empty()) {
    std::string w;
    for (int64_t x : widths) w += (w.empty() ? "" : ", ") + std::to_string(x);
    plan.notes.push_back("Width study: the GPT at d_model " + w + " (heads of " + std::to_string(p.head_dim) +
                         "), the other settings as above.");
    plan.width_study = true;
  }
  if (!fine_tune) plan.notes.push_back(p.note);  // the preset's model, which a fine-tune does not train
  if (plan.tasks.size() > 1) {
    const train::TrainConfig& m = plan.tasks[1].base;
    const nn::TaskInfo& image = nn::task_info(nn::Task::classifier);
    std::snprintf(buf, sizeof buf,
                  "%s: 784 inputs, %ld hidden layers of %ld (ReLU), 10 classes; batch %ld, %ld steps, learning rate "
                  "%g (standard) / %g (unit); test accuracy on the 10,000 %s test images.",
                  image.model_title.c_str(), static_cast<long>(m.layers), static_cast<long>(m.d_model),
                  static_cast<long>(m.batch_size),
                  static_cast<long>(m.steps), plan.tasks[1].lr_standard, plan.tasks[1].lr_unit, image.dataset.c_str());
    plan.notes.push_back(buf);
  }
  const std::vector<std::string> registered = registered_names();
  // Width studies and learning-rate sweeps are for the text task.
  auto classifier = [](const TaskPlan& t) { return nn::is_task(t.task, nn::Task::classifier); };
  for (const TaskPlan& t : plan.tasks)
    for (int64_t width : !classifier(t) && !widths.empty() ? widths : std::vector<int64_t>{0})
      for (const std::string& recipe : t.recipes) {
        RunSpec base;
        base.task = t.task;
        base.recipe = recipe;
        base.config = t.base;
        base.config.recipe = recipe;
        std::string name = recipe;
        const size_t slash = recipe.find('/');  // "recipe/key=value": a variant of a registered recipe
        if (slash != std::string::npos) {
          base.config.recipe = recipe.substr(0, slash);
          base.config.set.push_back(recipe.substr(slash + 1));
          name = base.config.recipe + "-" + recipe.substr(slash + 1);
        }
        if (width > 0) {  // a width study: the id names the width
          base.config.d_model = width;
          base.config.heads = o.heads ? o.heads : std::max<int64_t>(1, width / p.head_dim);
          train::validate(base.config);
          name = "d" + std::to_string(width) + "-" + name;
        }
        base.config.lr = t.lr_standard;
        bool unit = false;
        if (std::find(registered.begin(), registered.end(), base.config.recipe) == registered.end()) {
          base.available = false;
          base.unavailable_reason = "recipe '" + base.config.recipe + "' is not registered in this build";
        } else {
          const recipe::Recipe rec = recipe::find_recipe(base.config.recipe);
          base.parametrisation = recipe::parametrisation_name(rec.parametrisation);
          unit = recipe::unit_scaled(rec.parametrisation);
          if (unit) base.config.lr = t.lr_unit;
          // u-muP's own default unless --lr-unit was given.
          if (rec.parametrisation == recipe::Parametrisation::umup && o.lr_unit == 0) base.config.lr = train::kUmupDefaultLr;
        }
        // The rates: --lr-sweep's, else the preset's own sweep per parametrisation, else the default.
        std::vector<double> rates = sweep;
        if (rates.empty() && !classifier(t) && !p.sweep_standard.empty())
          rates = parse_lr_sweep(unit ? p.sweep_unit : p.sweep_standard);
        if (classifier(t) || rates.empty()) rates = {0.0};
        for (double swept_lr : rates)
          for (int64_t seed : plan.seeds) {
            RunSpec r = base;
            r.seed = seed;
            r.config.seed = seed;
            r.id = t.task + "-" + name;
            if (swept_lr > 0) {
              r.swept = true;
              r.config.lr = swept_lr;
              r.id += "-lr" + report::lr_label(swept_lr);
            }
            r.id += "-s" + std::to_string(seed);
            r.config.min_lr = r.config.lr / 10;
            plan.runs.push_back(std::move(r));
          }
      }
  return plan;
}

std::string plan_json(const ExperimentPlan& plan) {
  nlohmann::json j;
  j["preset"] = plan.preset;
  j["seeds"] = plan.seeds;
  for (const TaskPlan& t : plan.tasks) {
    train::TrainConfig c = t.base;
    nlohmann::json tj = nlohmann::json::parse(train::config_to_json(c));
    for (const char* k : {"recipe", "seed", "lr", "min-lr", "metrics", "save", "resume", "stop-after", "set"})
      tj.erase(k);
    j[t.task] = {{"settings", tj}, {"recipes", t.recipes}, {"lr_standard", t.lr_standard}, {"lr_unit", t.lr_unit}};
  }
  return j.dump(1);
}

}  // namespace mantissa::study
