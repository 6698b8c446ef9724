// The recipe study (`mantissa experiment`): the same GPT on the same corpus,
// the same token budget and data order, once per recipe and seed, plus an MLP
// on Fashion-MNIST; each run's results written atomically to its own folder
// (so Ctrl-C keeps finished runs and --resume skips them), then report.md and
// report.html (report/report.hpp).
//
// Recipes are just names: whatever recipe::recipes() holds at run time. A name
// of the preset that is not registered (or that this build cannot train) is
// reported as "not available" instead of failing the study.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/report/report.hpp"
#include "mantissa/train/config.hpp"

namespace mantissa::study {

// One model of the study with its size, budget and recipes.
struct TaskPlan {
  std::string task;  // the study's name of the task (nn::TaskInfo::id)
  train::TrainConfig base;  // model size, batch, steps, warm-up, evaluation cadence, data
  std::vector<std::string> recipes;
  double lr_standard = 0;  // per parametrisation (unit models need a larger LR: docs/unit-scaling.md)
  double lr_unit = 0;
};

struct ExperimentOptions {
  std::string preset = "quick";      // quick | paper | fp4 | transfer
  // The text task's model: gpt | llama (same sizes) | bert (masked LM, task "bert").
  std::string model = train::default_model_name();
  std::string norm;                  // the text model's --norm (pre | post; empty: the model's default)
  std::vector<std::string> recipes;  // GPT recipes; empty: the preset's
  std::vector<std::string> mlp_recipes;  // empty: the preset's; "none": no MLP runs
  int64_t seeds = 0;                 // 0: the preset's
  int64_t tokens = 0;                // GPT training tokens per run; 0: the preset's
  std::string out = "report";
  std::string data;       // GPT corpus (byte text or token data); empty: the default (Jane Austen)
  // A model directory (mantissa's save or transformers' save_pretrained):
  // every run of the text task fine-tunes it, its config.json fixing the
  // model and its sizes.
  std::string init_from;
  int64_t vocab_size = 0;  // a text model trained from scratch on token data: its vocabulary
  std::string mlp_data;   // Fashion-MNIST directory; empty: the default
  bool resume = false;
  int64_t threads = 0;    // 0: the library default
  // Size overrides (0: the preset's), mainly for tests and small machines.
  int64_t layers = 0, d_model = 0, heads = 0, seq_len = 0, batch_size = 0;
  int64_t mlp_steps = 0;
  double lr_standard = 0, lr_unit = 0;  // GPT learning rates; 0: the preset's
  // Non-empty: train every GPT recipe at each rate of this sweep
  // (parse_lr_sweep) instead of its parametrisation's default rate.
  std::string lr_sweep;
  // A width study (--preset transfer's d_model 64..512 by default): the GPT
  // at each width, run ids named by it. Empty: the preset's.
  std::vector<int64_t> widths;
  std::string command;  // the command line, for the report
  // The inspector section: after the runs, `inspect` for a few steps on each
  // GPT recipe that diverged or whose val bpc is more than inspect_gap_pct %
  // behind fp32's.
  bool inspect = true;
  double inspect_gap_pct = 2;
  int64_t inspect_steps = 25;
};

struct RunSpec {
  std::string id;  // folder name: "<task>-<recipe>-s<seed>"
  std::string task, recipe;
  int64_t seed = 0;
  train::TrainConfig config;  // complete: recipe, lr, seed, sizes, steps, data
  bool available = true;
  std::string unavailable_reason;
  std::string parametrisation = "standard";
  bool swept = false;  // one rate of an --lr-sweep (the id names the rate)
};

struct ExperimentPlan {
  std::string preset;
  std::vector<TaskPlan> tasks;
  std::vector<int64_t> seeds;
  std::vector<RunSpec> runs;        // in execution order: GPT runs first
  std::vector<std::string> notes;   // shown in the report (e.g. quick's smaller model)
  bool width_study = false;         // GPT runs at several d_model (ids carry "-d<width>")
};

// The learning rates of an --lr-sweep spec: "START:STOP:STEP" (STEP in
// octaves, STOP included when the steps land on it; START and STOP as 2^E or
// decimals: "2^-12:2^1:1" is 2^-12, 2^-11, ..., 2^1, "1e-3:4e-3:0.5" is 1e-3,
// 1e-3 x 2^0.5, ...), or a comma-separated list of rates. Ascending, at most
// 64 rates; throws std::invalid_argument naming --lr-sweep otherwise.
std::vector<double> parse_lr_sweep(const std::string& spec);

// The preset names and their recipe lists (for --help and tests).
std::vector<std::string> preset_names();
// Builds the plan; throws std::invalid_argument naming the flag for bad
// options (unknown preset, non-positive sizes, empty recipe names).
ExperimentPlan make_plan(const ExperimentOptions& options);
// The plan's settings as JSON (shown in the report and stored per run).
std::string plan_json(const ExperimentPlan& plan);

// Runs the plan, printing progress to `log` (a \r-updated line when
// `terminal`), writing <out>/runs/<id>/ per run and the report after every
// run. Throws std::invalid_argument (exit code 2) when --out cannot be
// written or the data cannot be found, before any training.
struct ExperimentOutcome {
  std::vector<report::RunResult> results;
  report::ReportFiles report;
  bool interrupted = false;
  int ran = 0, resumed = 0;
  int failed = 0;  // runs that stopped with an error (not kept); the CLI exits non-zero

  double seconds = 0;
};
ExperimentOutcome run_experiment(const ExperimentOptions& options, FILE* log, bool terminal);

// The inspector section: runs `inspect` (inspect_steps steps, the study's
// model and data, files in <out>/inspect/<recipe>/) on each GPT recipe of
// `results` that diverged or fell behind fp32 by more than
// options.inspect_gap_pct; an inspection that fails is reported as such.
std::vector<report::InspectorSection> inspect_laggards(const ExperimentOptions& options, const ExperimentPlan& plan,
                                                       const std::vector<report::RunResult>& results, FILE* log);

// One run as a library call (no report); honours the interrupt flag between
// steps by throwing ExperimentInterrupted.
struct ExperimentInterrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};
class StudyClock;  // experiment_eta.hpp
// Where a run's wall time went, and the CPU time it used (all threads).
struct RunTimes {
  double setup = 0, train = 0, eval = 0, cpu = 0;
};
struct RunProgress {
  FILE* log = nullptr;
  bool terminal = false;
  std::string label;                  // e.g. "[3/17] gpt fp16-amp seed 1337"
  const StudyClock* clock = nullptr;  // the study's estimates; nullptr: this run's own ETA only
  size_t index = 0;                   // this run's place in the plan, for `clock`
  RunTimes* times = nullptr;          // filled in when given
};
// dir: where metrics.jsonl goes; empty: nowhere (a data-parallel rank other than 0).
report::RunResult execute_run(const RunSpec& spec, const std::string& dir, const RunProgress& progress);

// Ctrl-C handling: install() makes SIGINT/SIGTERM set a flag that
// execute_run checks after every step; restore() puts the old handlers back.
void install_interrupt_handler();
void restore_interrupt_handler();
bool interrupt_requested();
void request_interrupt();  // as if Ctrl-C was pressed (tests)
void clear_interrupt();

// Versions (mantissa, compiler, oneDNN) and machine (CPU, threads, memory) for the report.
std::map<std::string, std::string> version_info();
// The commit checked out in repo, read from its .git (a directory, or a
// worktree's "gitdir:" file) without running git: "<hash> (<branch>)",
// "<hash>" when detached, empty if none is found.
std::string git_head(const std::string& repo);
std::map<std::string, std::string> machine_info();

}  // namespace mantissa::study
