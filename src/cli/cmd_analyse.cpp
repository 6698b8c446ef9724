// `mantissa analyse --model gpt --recipe R [--data PATH] [size flags]
// [--checkpoint DIR] --out DIR [--baseline RECIPE]`: one batch at
// initialisation (or from a checkpoint), per-op forward and backward scale
// statistics printed as a table and written to DIR/scales.csv, and the per-op
// scale plot DIR/scales.svg (with --baseline: that recipe's model drawn too,
// e.g. the standard GPT beside the unit-scaled one).
#include <cstdio>
#include <memory>

#include "cli/command.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/analyse/analyse.hpp"

namespace mantissa::cli {
namespace {

struct AnalyseArgs {
  analyse::AnalyseOptions options;
  std::string out;
  std::string baseline;
};

void analyse_command(const AnalyseArgs& a) {
  if (a.out.empty()) throw UsageError("--out DIR is required");
  const train::TrainConfig& c = a.options.config;
  if (nn::find_model_kind(c.model) == nullptr)
    throw UsageError("--model must be " + nn::model_kind_names() + ", got '" + c.model + "'");
  if (c.threads > 0) kernels::set_num_threads(c.threads);
  const analyse::Analysis main = analyse::analyse(a.options);
  std::printf("mantissa analyse: %s model, recipe %s (%s parametrisation), loss %.4f\n", c.model.c_str(),
              main.recipe.c_str(), main.parametrisation.c_str(), main.loss);
  std::printf("underflow/overflow measured against %s (forward) and %s (backward)\n\n", main.forward_format.c_str(),
              main.backward_format.c_str());
  std::fputs(analyse::analysis_table(main).c_str(), stdout);
  std::fputs(analyse::analysis_notes(main).c_str(), stdout);
  std::vector<std::pair<std::string, const analyse::Analysis*>> models{{main.recipe, &main}};
  std::unique_ptr<analyse::Analysis> base;
  if (!a.baseline.empty()) {
    analyse::AnalyseOptions bo = a.options;
    bo.config.recipe = a.baseline;
    bo.checkpoint.clear();
    base = std::make_unique<analyse::Analysis>(analyse::analyse(bo));
    models.emplace_back(base->recipe, base.get());
  }
  const std::string title = std::string(a.options.checkpoint.empty() ? "at initialisation" : "from checkpoint") +
                            ": RMS per op, " + c.model;
  analyse::write_analysis(a.out, models, title);
  std::printf("\nwrote %s/scales.csv and %s/scales.svg\n", a.out.c_str(), a.out.c_str());
}

Registrar reg(40, [](CLI::App& app) {
  auto* cmd = app.add_subcommand("analyse", "per-op forward/backward scale statistics of one batch, table + CSV + SVG plot");
  auto a = std::make_shared<AnalyseArgs>();
  train::TrainConfig& c = a->options.config;
  cmd->add_option("--model", c.model, "gpt, llama, bert or mlp")->capture_default_str();
  cmd->add_option("--recipe", c.recipe, "recipe (see `mantissa recipes`)")->capture_default_str();
  cmd->add_option("--data", c.data, "text file (gpt) or Fashion-MNIST directory (mlp); default corpus if empty");
  cmd->add_option("--layers", c.layers, "gpt: blocks; mlp: hidden layers")->check(exact_integer<int64_t>())->capture_default_str();
  cmd->add_option("--d-model", c.d_model, "gpt: width; mlp: hidden width")->check(exact_integer<int64_t>())->capture_default_str();
  cmd->add_option("--heads", c.heads, "attention heads")->check(exact_integer<int64_t>())->capture_default_str();
  cmd->add_option("--norm", c.norm, "gpt, bert: pre or post-norm blocks (default: gpt pre, bert post)");
  cmd->add_option("--batch-size", c.batch_size, "sequences (or examples) in the batch")->check(exact_integer<int64_t>())->capture_default_str();
  cmd->add_option("--seq-len", c.seq_len, "tokens per sequence (gpt)")->check(exact_integer<int64_t>())->capture_default_str();
  cmd->add_option("--seed", c.seed, "initialisation and data seed")->check(exact_integer<int64_t>())->capture_default_str();
  cmd->add_option("--threads", c.threads, "compute threads (0: default)")->check(exact_integer<int64_t>());
  cmd->add_option("--set", c.set, "recipe override key=value, or unit.KEY=VALUE for the unit model (repeatable)");
  cmd->add_option("--checkpoint", a->options.checkpoint, "analyse the weights of this model/checkpoint directory");
  cmd->add_option("--out", a->out, "directory for scales.csv and scales.svg")->required();
  cmd->add_option("--baseline", a->baseline, "also analyse this recipe at init and draw it on the same plot");
  cmd->callback([a] { analyse_command(*a); });
});

}  // namespace
}  // namespace mantissa::cli
