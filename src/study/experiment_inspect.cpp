// The study's inspector section: the recipes that diverged or fell behind
// fp32 are retrained for a few steps under `inspect` (the study's model,
// data and settings, beside an fp32 shadow) and their worst cast sites and
// figures go into the report.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "mantissa/dist/group.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/nn/tasks.hpp"
#include "mantissa/study/experiment.hpp"
#include "mantissa/inspect/inspect.hpp"

namespace mantissa::study {

namespace fs = std::filesystem;

namespace {

constexpr size_t kTopSites = 8;  // rows per recipe in the report

std::string reason_of(const report::RecipeSummary& s, double threshold) {
  if (s.diverged > 0) {
    std::string r = "diverged in " + std::to_string(s.diverged) + " of " + std::to_string(s.finished) + " seed(s)";
    if (s.first_diverged_at > 0) r += ", first at step " + std::to_string(s.first_diverged_at);
    return r;
  }
  if (std::isfinite(s.gap_pct) && s.gap_pct > threshold) return "val bpc " + report::fmt_fixed(s.gap_pct, 2) + " % behind fp32";
  return {};
}

double best_rate(const std::vector<report::SweepCurve>& sweep, const std::string& recipe) {
  for (const auto& c : sweep)
    if (nn::is_task(c.task, nn::Task::language_model) && c.recipe == recipe) return c.best_lr;
  return report::kNaN;
}

}  // namespace

std::vector<report::InspectorSection> inspect_laggards(const ExperimentOptions& options, const ExperimentPlan& plan,
                                                       const std::vector<report::RunResult>& results, FILE* log) {
  std::vector<report::InspectorSection> sections;
  const nn::Task lm = nn::Task::language_model;  // the study inspects its language model's recipes
  // In a learning-rate sweep each recipe is judged, and inspected, at its best rate.
  const std::vector<report::SweepCurve> sweep = report::lr_sweep(results);
  for (const report::RecipeSummary& s : report::summarize(report::at_best_rate(results, sweep))) {
    if (!nn::is_task(s.task, lm) || s.recipe == "fp32" || s.finished == 0) continue;
    const std::string reason = reason_of(s, options.inspect_gap_pct);
    if (reason.empty()) continue;
    const RunSpec* spec = nullptr;
    for (const RunSpec& r : plan.runs)
      if (!spec && nn::is_task(r.task, lm) && r.recipe == s.recipe && r.available && (!r.swept || best_rate(sweep, s.recipe) == r.config.lr))
        spec = &r;
    if (!spec) continue;

    report::InspectorSection sec;
    sec.recipe = s.recipe;
    sec.reason = reason;
    sec.steps = options.inspect_steps;
    sec.dir = "inspect/" + s.recipe;
    inspect::InspectOptions io;
    io.config = inspect::without_unused_settings(spec->config);
    io.config.steps = options.inspect_steps;
    io.config.warmup = std::min(io.config.warmup, options.inspect_steps);
    io.max_values = inspect::kWatchValues;  // bounded cost per cast
    // Data parallel: rank 0 writes the inspection; the others only compute.
    if (dist::Group::world().rank() == 0) io.out = (fs::path(options.out) / sec.dir).string();
    io.print = false;
    if (log) {
      std::fprintf(log, "inspect %s (%s): %ld steps beside an fp32 shadow\n", s.recipe.c_str(), reason.c_str(),
                   static_cast<long>(options.inspect_steps));
      std::fflush(log);
    }
    try {
      const inspect::InspectResult r = inspect::inspect(io);
      for (size_t i = 0; i < r.ranking.size() && i < kTopSites; ++i) {
        const inspect::Verdicts::Ranked& x = r.ranking[i];
        sec.top.push_back({x.site, x.kind, x.format, x.cause, x.lost, x.sqnr_db, x.min_sqnr_db, x.underflow,
                           x.saturation, x.scale_log2});
      }
      for (const char* f : {"sqnr_heatmap.svg", "fractions.svg", "grad_cosine.svg"}) {
        const fs::path p = fs::path(io.out) / f;
        std::error_code ec;
        if (fs::is_regular_file(p, ec)) sec.figures.emplace_back(f, io::read_file(p.string()));
      }
      if (log && !sec.top.empty()) {
        std::fprintf(log, "inspect %s: worst site %s (%s)\n", s.recipe.c_str(), sec.top[0].site.c_str(),
                     sec.top[0].cause.c_str());
        std::fflush(log);
      }
    } catch (const std::exception& e) {
      sec.note = e.what();
      if (log) std::fprintf(log, "inspect %s: failed (%s)\n", s.recipe.c_str(), e.what());
    }
    sections.push_back(std::move(sec));
  }
  return sections;
}

}  // namespace mantissa::study
