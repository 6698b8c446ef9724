// `mantissa inspect --recipe R [model, data and recipe flags as for train]
// --steps N [--sync-every K | --free-running] [--sample-every k] --out DIR`:
// trains under R beside an fp32 shadow on the same batches and says, cast
// site by cast site, where R loses the signal (inspect/inspect.hpp).
#include <cstdio>
#include <memory>

#include "cli/command.hpp"
#include "cli/train_flags.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/inspect/inspect.hpp"

namespace mantissa::cli {
namespace {

struct InspectArgs {
  inspect::InspectOptions o;
  bool free_running = false;
  int64_t rows = 15;
};

void inspect_command(CLI::App* cmd, InspectArgs& a) {
  apply_train_config_file(cmd, a.o.config);
  if (a.o.out.empty()) throw UsageError("--out DIR is required");
  if (a.free_running && cmd->count("--sync-every") > 0) throw UsageError("--free-running and --sync-every exclude each other");
  if (a.free_running) a.o.sync_every = 0;
  if (a.o.config.threads > 0) kernels::set_num_threads(static_cast<int>(a.o.config.threads));
  const train::TrainConfig& c = a.o.config;
  std::printf("mantissa inspect: %s model, recipe %s against its fp32 shadow, %ld steps, %s, every %ld-th step looked at\n",
              c.model.c_str(), c.recipe.c_str(), static_cast<long>(c.steps),
              a.o.sync_every > 0 ? ("shadow re-synchronised every " + std::to_string(a.o.sync_every) + " step(s)").c_str()
                                 : "shadow free-running",
              static_cast<long>(a.o.sample_every));
  std::fflush(stdout);
  const inspect::InspectResult r = inspect::inspect(a.o);
  std::printf("\ncast sites, worst first (SQNR: median over sampled steps, against each cast's own fp32 input):\n%s",
              inspect::ranking_table(r.ranking, static_cast<size_t>(a.rows)).c_str());
  const inspect::StepRecord& last = r.steps.back();
  std::printf("\nlast step: loss %.4f, fp32 shadow %.4f (%+.2f%%); %zu warning(s)\n", last.loss, last.shadow_loss,
              100 * (last.loss - last.shadow_loss) / last.shadow_loss, r.warnings.size());
  std::printf("step time: %s %.1f ms (probe included), shadow %s %.1f ms\n", r.recipe.c_str(), 1e3 * r.step_seconds,
              r.shadow_recipe.c_str(), 1e3 * r.shadow_step_seconds);
  std::printf("wrote %s/{sites.csv, sites.jsonl, params.csv, steps.csv, ranking.txt, ranking.json, warnings.txt, sqnr_heatmap.svg, "
              "fractions.svg, grad_cosine.svg}\n",
              a.o.out.c_str());
}

Registrar reg(45, [](CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "train under a recipe beside an fp32 shadow and rank the cast sites that lose the signal");
  auto a = std::make_shared<InspectArgs>();
  a->o.config.steps = 50;
  add_train_flags(cmd, a->o.config);
  cmd->add_option("--sync-every", a->o.sync_every, "re-synchronise the shadow to the run's weights every K steps")
      ->capture_default_str();
  cmd->add_flag("--free-running", a->free_running, "never re-synchronise: the shadow shows the accumulated drift");
  cmd->add_option("--sample-every", a->o.sample_every, "look at every k-th step")->capture_default_str();
  cmd->add_option("--max-values", a->o.max_values, "values looked at per cast (an even stride; 0: all)")
      ->capture_default_str();
  cmd->add_option("--sqnr-floor", a->o.verdicts.sqnr_floor_db, "warn when a site's SQNR falls below this (dB)")
      ->capture_default_str();
  cmd->add_option("--rows", a->rows, "rows of the ranked table on the terminal")->capture_default_str();
  cmd->add_option("--out", a->o.out, "directory for the tables and figures (new, empty, or an earlier inspect's)");
  cmd->callback([cmd, a] { inspect_command(cmd, *a); });
});

}  // namespace
}  // namespace mantissa::cli
