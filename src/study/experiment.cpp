// The study loop: runs the plan one run after another, each in a temporary
// folder renamed into <out>/runs/<id>/ once complete (so an interrupted
// study keeps exactly the runs that finished), and rewrites the report after
// every run. Under mpirun every run trains data-parallel on all ranks; rank 0
// alone reads and writes files and tells the others which runs --resume keeps.
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "mantissa/recipe/recipe.hpp"
#include "mantissa/dist/group.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/nn/tasks.hpp"
#include "mantissa/report/scales.hpp"
#include "mantissa/report/svg.hpp"
#include "mantissa/analyse/analyse.hpp"
#include "mantissa/study/experiment.hpp"
#include "study/timing.hpp"
#include "mantissa/study/experiment_eta.hpp"
#include "mantissa/train/session.hpp"

namespace mantissa::study {

namespace fs = std::filesystem;

namespace {

// What must match for --resume to reuse a finished run (threads do not
// change what is computed, so they are left out).
std::string spec_json(const RunSpec& s) {
  nlohmann::json c = nlohmann::json::parse(train::config_to_json(s.config));
  c.erase("threads");
  return nlohmann::json{{"id", s.id}, {"task", s.task}, {"recipe", s.recipe}, {"seed", s.seed}, {"config", c}}.dump(1);
}

// A finished run stored by an earlier invocation with the same spec, if any.
std::optional<report::RunResult> stored_result(const fs::path& dir, const RunSpec& spec) {
  std::error_code ec;
  if (!fs::exists(dir / "result.json", ec) || !fs::exists(dir / "spec.json", ec)) return std::nullopt;
  try {
    if (nlohmann::json::parse(io::read_file((dir / "spec.json").string())) != nlohmann::json::parse(spec_json(spec)))
      return std::nullopt;
    return report::run_result_from_json(io::read_file((dir / "result.json").string()));
  } catch (const std::exception&) {
    return std::nullopt;  // unreadable: run it again
  }
}

// Marks an --out directory as a study's: only a directory that is new,
// empty or carries this file is written into (runs and report files inside
// it are then replaced and removed freely).
constexpr const char* kStudyMarker = ".mantissa-report";

void claim_out_dir(const fs::path& out) {
  io::claim_output_dir(out.string(), "--out", kStudyMarker, "mantissa experiment report directory\n");
  std::error_code ec;
  fs::create_directories(out / "runs", ec);
  if (ec) throw std::invalid_argument("--out '" + out.string() + "': cannot create runs/ (" + ec.message() + ")");
}

std::string resolve_data(const std::string& given, const std::string& kind, const std::string& flag) {
  if (given.empty()) return train::default_data_path(kind);
  std::error_code ec;
  if (!fs::exists(given, ec)) throw std::invalid_argument(flag + " " + given + ": no such file or directory");
  return given;
}

// The per-op scale plot of the standard (fp32) and unit-scaled (unit-fp32)
// GPT at initialisation, one batch each (the analyse API); empty with the
// reason in `note` when it cannot be drawn.
std::string init_scale_plot(const TaskPlan& gpt, int64_t seed, std::string& note) {
  for (const char* name : {"fp32", "unit-fp32"}) {
    bool found = false;
    for (const auto& r : recipe::recipes()) found = found || r.name == name;
    if (!found) {
      note = std::string("not available: recipe ") + name + " is not registered in this build.";
      return {};
    }
  }
  try {
    analyse::AnalyseOptions o;
    o.config = gpt.base;
    o.config.seed = seed;
    o.config.recipe = "fp32";
    const analyse::Analysis standard = analyse::analyse(o);
    o.config.recipe = "unit-fp32";
    const analyse::Analysis unit = analyse::analyse(o);
    const report::LinePlot p = report::scale_plot({{"standard", &standard.ops}, {"unit", &unit.ops}},
                                                  "Per-op RMS at initialisation: standard (fp32) vs unit-scaled (unit-fp32) GPT");
    return report::render(p);
  } catch (const std::exception& e) {
    note = std::string("not available: the analysis failed (") + e.what() + ").";
    return {};
  }
}

// Wall and CPU seconds of the study's parts, printed at the end so the
// presets' budgets can be checked on a busy machine (CPU seconds / threads
// approximates the wall time on an idle one).
struct Account {
  double wall = 0, cpu = 0;
  void add(std::chrono::steady_clock::time_point t, double cpu0) {
    wall += since(t);
    cpu += cpu_seconds() - cpu0;
  }
};

// The plan with its --out directory claimed and every run's data path
// resolved (the defaults fetched by scripts/data.sh, or the given files).
ExperimentPlan checked_plan(const ExperimentOptions& options, bool writer) {
  ExperimentPlan plan = make_plan(options);
  if (writer) claim_out_dir(fs::path(options.out));
  for (TaskPlan& t : plan.tasks) {
    const std::string path = resolve_data(t.base.data, t.base.model, nn::task_info(t.task).data_flag);
    t.base.data = path;
    for (RunSpec& r : plan.runs)
      if (r.task == t.task) r.config.data = path;
  }
  return plan;
}

report::ReportInput report_input(const ExperimentOptions& options, const ExperimentPlan& plan) {
  report::ReportInput input;
  input.command = options.command;
  input.preset = plan.preset;
  input.config_json = plan_json(plan);
  input.versions = version_info();
  input.machine = machine_info();
  input.notes = plan.notes;
  // The report's post-norm row belongs to the language model's table.
  input.post_norm = options.norm == "post" && nn::is_task(plan.tasks.front().task, nn::Task::language_model);
  return input;
}

void log_start(FILE* log, const ExperimentPlan& plan, const fs::path& out) {
  if (!log) return;
  std::fprintf(log, "mantissa experiment: preset %s, %zu runs (%zu GPT recipes x %zu seeds", plan.preset.c_str(),
               plan.runs.size(), plan.tasks[0].recipes.size(), plan.seeds.size());
  if (plan.tasks.size() > 1) std::fprintf(log, ", %zu MLP recipes", plan.tasks[1].recipes.size());
  std::fprintf(log, "), output in %s\n", out.string().c_str());
  std::fflush(log);
}

void log_run(FILE* log, const std::string& label, const RunSpec& spec, const report::RunResult& r,
             const RunTimes& times) {
  if (!log) return;
  if (r.status == "ok" || r.status == "diverged") {
    char metric[64];
    const std::string& name = nn::task_info(spec.task).metric_short;
    if (nn::is_task(spec.task, nn::Task::language_model))
      std::snprintf(metric, sizeof metric, "%s %.4f", name.c_str(), r.val_bpc);
    else if (nn::is_task(spec.task, nn::Task::masked_language_model))
      std::snprintf(metric, sizeof metric, "%s %.4f, masked acc %.2f %%", name.c_str(), r.val_bpc, 100.0 * r.accuracy);
    else std::snprintf(metric, sizeof metric, "test accuracy %.2f %%", 100.0 * r.accuracy);
    std::string status = r.status == "diverged" ? "DIVERGED at step " + std::to_string(r.diverged_at) + ", " : "";
    std::fprintf(log, "%s: %s%s, %s ms/step, %.1f s (setup %.1f, train %.1f, eval %.1f), CPU %.1f s\n", label.c_str(),
                 status.c_str(), metric, report::fmt_fixed(r.step_ms, 1).c_str(), r.seconds, times.setup, times.train,
                 times.eval, times.cpu);
  } else {
    std::fprintf(log, "%s: %s (%s)\n", label.c_str(), r.status.c_str(), r.error.c_str());
  }
  std::fflush(log);
}

// The runs of one study, one after another; each result goes into `outcome`.
struct StudyRuns {
  const ExperimentOptions& options;
  const ExperimentPlan& plan;
  const fs::path& out;
  FILE* log;
  bool terminal;
  StudyClock& clock;
  ExperimentOutcome& outcome;
  Account& account;
  dist::Group& group;
  bool writer;  // rank 0 (or one process): the only one touching files

  // The result an earlier invocation stored for run i, as rank 0 found it.
  std::optional<report::RunResult> stored(const fs::path& dir, const RunSpec& spec) {
    std::string json;
    if (writer)
      if (const auto r = stored_result(dir, spec)) json = report::to_json(*r);
    json = group.from_root(json, "the --resume all-gather");
    if (json.empty()) return std::nullopt;
    return report::run_result_from_json(json);
  }

  // Run i (or its stored result with --resume); false when Ctrl-C stopped it.
  bool run(size_t i) {
    const RunSpec& spec = plan.runs[i];
    const fs::path final_dir = out / "runs" / spec.id;
    char label[200];
    const std::string rate = spec.swept ? " lr " + report::lr_label(spec.config.lr) : "";
    std::snprintf(label, sizeof label, "[%zu/%zu] %s %s%s seed %ld", i + 1, plan.runs.size(), spec.task.c_str(), spec.recipe.c_str(),
                  rate.c_str(), static_cast<long>(spec.seed));
    if (options.resume && spec.available)
      if (auto stored = this->stored(final_dir, spec)) {
        if (log) std::fprintf(log, "%s: finished earlier, kept (--resume)\n", label);
        outcome.results.push_back(*stored);
        ++outcome.resumed;
        clock.skip(i);
        return true;
      }
    if (!spec.available) {
      if (log) std::fprintf(log, "%s: not available (%s)\n", label, spec.unavailable_reason.c_str());
      outcome.results.push_back(execute_run(spec, "", {}));
      clock.skip(i);
      return true;
    }
    RunTimes times;
    RunProgress progress;
    progress.log = log;
    progress.terminal = terminal;
    progress.label = label;
    progress.clock = &clock;
    progress.index = i;
    progress.times = &times;
    const auto run_t = std::chrono::steady_clock::now();
    const double run_c = cpu_seconds();
    const fs::path tmp = out / "runs" / ("." + spec.id + ".tmp");
    std::optional<report::RunResult> r = train_in(writer ? tmp : fs::path(), spec, progress);
    account.add(run_t, run_c);
    if (!r) {
      if (log) std::fprintf(log, "%s%s: interrupted, not kept\n", terminal ? "\r\033[K" : "", label);
      return false;
    }
    keep_or_drop(i, tmp, final_dir, *r);
    log_run(log, label, spec, *r, times);
    outcome.results.push_back(std::move(*r));
    return true;
  }

  // Trains in the temporary folder `tmp` (empty: writes nothing): the
  // result (status "failed" when the run threw), or nullopt when Ctrl-C
  // interrupted it (tmp removed).
  static std::optional<report::RunResult> train_in(const fs::path& tmp, const RunSpec& spec,
                                                   const RunProgress& progress) {
    std::error_code ec;
    if (!tmp.empty()) {
      fs::remove_all(tmp, ec);
      fs::create_directories(tmp, ec);
      if (ec) throw std::runtime_error("cannot create " + tmp.string() + ": " + ec.message());
    }
    try {
      if (!tmp.empty()) io::write_file_atomic((tmp / "spec.json").string(), spec_json(spec));
      return execute_run(spec, tmp.string(), progress);
    } catch (const ExperimentInterrupted&) {
      fs::remove_all(tmp, ec);
      return std::nullopt;
    } catch (const std::exception& e) {
      report::RunResult r;
      r.id = spec.id;
      r.task = spec.task;
      r.recipe = spec.recipe;
      r.seed = spec.seed;
      r.status = "failed";
      r.error = e.what();
      return r;
    }
  }

  // A finished or diverged run is renamed into runs/<id>/ with its
  // result.json; a failed or not available one is removed (only a failure
  // fails the study: a recipe the model does not implement is reported).
  void keep_or_drop(size_t i, const fs::path& tmp, const fs::path& final_dir, const report::RunResult& r) {
    std::error_code ec;
    if (r.status == "ok" || r.status == "diverged") {
      if (writer) {
        io::write_file_atomic((tmp / "result.json").string(), report::to_json(r));
        fs::remove_all(final_dir, ec);
        fs::rename(tmp, final_dir, ec);
        if (ec) throw std::runtime_error("cannot rename " + tmp.string() + " to " + final_dir.string() + ": " + ec.message());
      }
      clock.finished(i, r.seconds);
      ++outcome.ran;
    } else {
      if (writer) fs::remove_all(tmp, ec);
      clock.dropped(i);
      if (r.status == "failed") ++outcome.failed;
    }
  }
};

// After the runs: the inspector on the laggards (unless interrupted or
// turned off), then the final report.
void finish_report(const ExperimentOptions& options, const ExperimentPlan& plan, ExperimentOutcome& outcome,
                   report::ReportInput& input, FILE* log, Account& reports, bool writer) {
  outcome.interrupted = interrupt_requested();
  input.runs = outcome.results;
  input.interrupted = outcome.interrupted;
  if (!options.inspect) input.inspection_note = "Inspector: turned off (--no-inspect).";
  else if (plan.width_study) input.inspection_note = "Inspector: not run in a width study.";
  else if (!plan.tasks.empty() &&
           (!plan.tasks[0].base.init_from.empty() || nn::task_info(plan.tasks[0].task).token_data))
    input.inspection_note = "Inspector: not run on a fine-tuning study or token data (it trains its own "
                            "model on byte text).";
  else if (!outcome.interrupted) {
    input.inspections = inspect_laggards(options, plan, outcome.results, log);
    if (input.inspections.empty())
      input.inspection_note = "No GPT recipe diverged or fell behind fp32 by more than " +
                              report::fmt_fixed(options.inspect_gap_pct, 1) + " % val bpc: nothing to inspect.";
  }
  const auto report_t = std::chrono::steady_clock::now();
  const double report_c = cpu_seconds();
  if (writer) outcome.report = report::write_report(options.out, input);
  reports.add(report_t, report_c);
}

}  // namespace

ExperimentOutcome run_experiment(const ExperimentOptions& options, FILE* log, bool terminal) {
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  dist::Group& group = dist::Group::world();
  const bool writer = group.rank() == 0;
  const ExperimentPlan plan = checked_plan(options, writer);
  const fs::path out(options.out);
  report::ReportInput input = report_input(options, plan);
  ExperimentOutcome outcome;
  log_start(log, plan, out);

  // Ctrl-C from here on ends the study with a report of what finished.
  install_interrupt_handler();
  Account setup, runs, reports;
  // The analysis compares a standard and a unit-scaled model built from sizes on byte text.
  const bool from_sizes = plan.tasks.empty() || plan.tasks[0].base.init_from.empty();
  const bool text_lm = !plan.tasks.empty() && nn::is_task(plan.tasks[0].task, nn::Task::language_model);
  if (text_lm && !from_sizes)
    input.scale_plot_note = "not run on a fine-tuning study (the analysis builds its models from sizes)";
  else if (text_lm && nn::task_info(plan.tasks[0].task).token_data)
    input.scale_plot_note = "not run on token data (the analysis reads byte text)";
  else if (text_lm) {
    if (log) {
      std::fprintf(log, "per-op scale analysis at initialisation (standard vs unit-scaled GPT, one batch each)\n");
      std::fflush(log);
    }
    input.scale_plot_svg = init_scale_plot(plan.tasks[0], plan.seeds.front(), input.scale_plot_note);
  }
  setup.add(t0, cpu_start);  // checks, versions, machine, the analysis

  StudyClock clock(plan.runs);
  StudyRuns study{options, plan, out, log, terminal, clock, outcome, runs, group, writer};
  for (size_t i = 0; i < plan.runs.size() && !interrupt_requested(); ++i) {
    if (!study.run(i)) break;
    input.runs = outcome.results;
    const auto report_t = std::chrono::steady_clock::now();
    const double report_c = cpu_seconds();
    if (writer) outcome.report = report::write_report(out.string(), input);  // a consistent report after every run
    clock.between_runs(since(report_t));
    reports.add(report_t, report_c);
  }
  finish_report(options, plan, outcome, input, log, reports, writer);
  restore_interrupt_handler();  // after the last report: a Ctrl-C while writing it is not fatal

  outcome.seconds = since(t0);
  if (log) {
    std::fprintf(log,
                 "time: %.1f s wall, %.1f s CPU: setup and analysis %.1f s (CPU %.1f), runs %.1f s (CPU %.1f), "
                 "reports %.1f s (CPU %.1f)\n",
                 outcome.seconds, cpu_seconds() - cpu_start, setup.wall, setup.cpu, runs.wall, runs.cpu, reports.wall,
                 reports.cpu);
    std::fflush(log);
  }
  return outcome;
}

}  // namespace mantissa::study
