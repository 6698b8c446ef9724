// The recipe study's report: per-run results as they are stored on disk
// (result.json in each run's folder), the statistics the tables need (mean
// and sample standard deviation over seeds, gap to fp32, divergence), and the
// writer of report.md and report.html with the figures (SVG, embedded inline
// in the HTML). Independent of the trainer, so tests can feed it synthetic
// results and check every number against hand arithmetic.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "mantissa/nn/tasks.hpp"

namespace mantissa::report {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct CurvePoint {
  int64_t step = 0;
  double value = kNaN;
};

// Gradient exponents (floor(log2 |g|)) of one model, the Micikevicius figure.
struct ExponentCounts {
  std::string what;  // e.g. "parameter gradients of the fp32 GPT after training"
  int lo = 0;
  std::vector<int64_t> counts;  // counts[i] for exponent lo + i
  int64_t zeros = 0;
  int64_t nonfinite = 0;
};

// One training run (one task, recipe and seed) as the study stores it.
struct RunResult {
  std::string id;      // folder name, e.g. "gpt-fp16-amp-s1"
  std::string task;    // the study's name of its task (nn::TaskInfo::id: "gpt", "bert", "mlp")
  std::string recipe;
  int64_t seed = 0;
  // "ok", "diverged" (the trainer saw non-finite losses), "not-available"
  // (recipe not registered or not supported by this build), "failed".
  std::string status = "ok";
  std::string error;  // why, for not-available and failed
  std::string parametrisation = "standard";
  double lr = kNaN;
  int64_t d_model = 0;        // model width (0: unknown); a study over widths compares per width
  int64_t steps = 0;          // done
  int64_t steps_planned = 0;
  int64_t tokens = 0;         // tokens (gpt) or examples (mlp) trained on
  int64_t diverged_at = 0;    // step, when status == "diverged"
  int64_t skipped_steps = 0;  // optimizer steps skipped for non-finite gradients
  double final_train_loss = kNaN;  // mean training loss (nats) over the last steps
  double val_loss = kNaN;          // nats per target
  double val_bpc = kNaN;           // the text task's metric: bits per character; nats per token on token data
  double divergence_threshold = kNaN;  // the run's own (token data: ln vocabulary); NaN: its task's
  double accuracy = kNaN;          // mlp: test accuracy; bert: masked-token accuracy; in [0, 1]
  double final_loss_scale = 1;
  double step_ms = kNaN;           // mean, first (warm-up) step excluded
  double tokens_per_s = kNaN;
  double peak_memory_bytes = 0;    // peak of the counted allocator over the run
  double seconds = 0;              // wall time of the run
  std::vector<CurvePoint> val_curve;         // gpt: val_bpc; mlp: val_loss
  std::vector<CurvePoint> loss_scale_curve;  // per step (thinned)
  std::vector<ExponentCounts> grad_exponents;  // optional, at most one
};

std::string to_json(const RunResult& r);  // one JSON object, non-finite numbers as null
RunResult run_result_from_json(const std::string& json);  // throws std::invalid_argument

// ---- statistics --------------------------------------------------------------
struct MeanStd {
  int n = 0;          // finite values used
  double mean = kNaN;
  double std = kNaN;  // sample standard deviation (n - 1); NaN when n < 2
};
// Mean and sample std of the finite values (NaN and inf are left out).
MeanStd mean_std(const std::vector<double>& values);

// The loss of guessing uniformly: above it a run has learnt nothing and is
// counted as diverged (nn::TaskInfo::divergence_threshold).
double divergence_threshold(const std::string& task);
// A run's: its own where it has one, else its task's.
double divergence_threshold(const RunResult& r);
// A task's over these runs: its own, else the largest of its runs' (a bound for figures).
double divergence_threshold(const std::vector<RunResult>& runs, const std::string& task);
// Diverged: the trainer said so, or the final validation metric (gpt: val_bpc,
// mlp: val_loss) is NaN, inf or above the threshold. Only for finished runs
// (status ok or diverged).
bool is_diverged(const RunResult& r, double threshold);

// One table row: all seeds of one (task, recipe).
struct RecipeSummary {
  std::string task, recipe;
  std::string status;  // "ok", or "not-available"/"failed" when no seed finished
  std::string note;    // the first error, for not-available/failed
  int runs = 0, finished = 0, diverged = 0;
  int64_t first_diverged_at = 0;  // smallest step among diverged seeds (0: unknown)
  MeanStd metric;       // gpt, bert: val_bpc; mlp: accuracy in % — over seeds that did not diverge
  MeanStd train_loss;   // final training loss (nats) over the same seeds
  MeanStd masked_accuracy;  // bert: masked-token accuracy in % over the same seeds
  double gap_pct = kNaN;  // gpt: 100 (mean - fp32 mean) / fp32 mean; mlp: accuracy points minus fp32
  double skipped_steps = kNaN;  // mean over finished seeds
  double step_ms = kNaN, tokens_per_s = kNaN;  // means over finished seeds
  double peak_memory_bytes = kNaN;             // max over finished seeds
};

// Rows in first-appearance order of (task, recipe) in `runs`; the reference
// recipe (fp32) of each task gives the gap column.
std::vector<RecipeSummary> summarize(const std::vector<RunResult>& runs, const std::string& reference = "fp32");

// ---- learning-rate sweeps ------------------------------------------------------
// A study that trains each recipe at several learning rates (`experiment
// --lr-sweep`) reports each recipe at its own best rate, as the unit-scaling
// paper did. Rates are the runs' `lr`; a (task, recipe) with one rate is no sweep.
struct SweepPoint {
  double lr = kNaN;
  int runs = 0, finished = 0, diverged = 0;  // seeds at this rate
  MeanStd metric;  // gpt: val_bpc; mlp: accuracy in % — over seeds that did not diverge
};
struct SweepCurve {
  std::string task, recipe;
  int64_t d_model = 0;  // runs of different widths make different curves
  std::vector<SweepPoint> points;  // ascending lr
  // The best rate: lowest mean val bpc (highest accuracy) among rates where
  // every seed finished without diverging; NaN when there is none.
  double best_lr = kNaN;
  MeanStd best;
  bool best_at_edge = false;   // the best rate is the sweep's smallest or largest: widen it
  double gap_pct = kNaN;       // as RecipeSummary::gap_pct, both recipes at their best rate
};
// Curves in first-appearance order of (task, recipe, d_model); the reference
// recipe of each task at the same width gives the gap.
std::vector<SweepCurve> lr_sweep(const std::vector<RunResult>& runs, const std::string& reference = "fp32");
// True when some (task, recipe) was trained at more than one rate.
bool is_sweep(const std::vector<SweepCurve>& curves);
// The runs at their recipe's best rate (recipes without one keep all runs):
// what the recipe tables show in a sweep.
std::vector<RunResult> at_best_rate(const std::vector<RunResult>& runs, const std::vector<SweepCurve>& curves);
// "2^-10" for powers of two, else the shortest round-trip decimal ("0.003").
std::string lr_label(double lr);
// | recipe | best lr | val bpc (or accuracy) at it | gap to fp32 at fp32's best | val per rate tried ...
// (with a d_model column when the task's curves have several widths).
std::string sweep_table_md(const std::vector<SweepCurve>& curves, const std::string& task);
// The widths of the task's curves, ascending (one entry: no width study).
std::vector<int64_t> sweep_widths(const std::vector<SweepCurve>& curves, const std::string& task);

// ---- the report ---------------------------------------------------------------
// `mantissa inspect` on one recipe that diverged or fell behind fp32: its
// worst cast sites and figures (written by the train layer, shown here).
struct InspectorSection {
  std::string recipe;
  std::string reason;  // why it was inspected, e.g. "val bpc 4.10% behind fp32"
  int64_t steps = 0;   // inspected steps (each with an fp32 shadow)
  std::string dir;     // the inspector's files, relative to the report directory
  std::string note;    // why there are no figures, when the inspection failed
  struct Site {
    std::string site, kind, format, cause;
    double lost = 0, sqnr_db = 0, min_sqnr_db = 0, underflow = 0, saturation = 0;
    int scale_log2 = 0;
  };
  std::vector<Site> top;  // worst first
  std::vector<std::pair<std::string, std::string>> figures;  // (file name, SVG text)
};

struct ReportInput {
  std::string title = "mantissa recipe study";
  std::vector<RunResult> runs;
  std::string command;                   // the exact command line
  std::string preset;                    // "quick", "paper", ...
  std::string config_json;               // the study's settings
  std::map<std::string, std::string> versions;  // "mantissa", "compiler", "oneDNN", ...
  std::map<std::string, std::string> machine;   // "cpu", "threads", ...
  std::vector<std::string> notes;        // free text shown under the tables (e.g. quick uses a smaller model)
  bool post_norm = false;                // the GPT runs used post-norm blocks (`--norm post`)
  // Per-op scale plot of the standard vs unit-scaled GPT at init (SVG), or
  // empty with the reason in scale_plot_note.
  std::string scale_plot_svg;
  std::string scale_plot_note;
  bool interrupted = false;  // Ctrl-C: the report shows what finished
  std::vector<InspectorSection> inspections;
  std::string inspection_note;  // shown when there are none (e.g. turned off)
};

// Markdown tables (also used in the HTML page, converted there).
std::string main_table_md(const std::vector<RecipeSummary>& rows);
std::string mlp_table_md(const std::vector<RecipeSummary>& rows);
// BERT (masked LM): bits per masked character, its gap to fp32, masked-token accuracy, ...
std::string bert_table_md(const std::vector<RecipeSummary>& rows);
// A text task on token data (nn::task_info(task, true)): its metric in nats
// per (masked) token and the gap to fp32.
std::string token_table_md(const std::vector<RecipeSummary>& rows, const nn::TaskInfo& task);
// post_norm: the study's GPT blocks were post-norm (`--norm post`); mantissa's
// row is labelled so and sits under the paper's post-norm row.
std::string unit_paper_table_md(const std::vector<RecipeSummary>& rows, bool post_norm = false);
std::string scalify_table_md(const std::vector<RecipeSummary>& rows);
// BERT laid out like the unit-scaling paper's BERT table: rows regular (fp32,
// fp16-amp, fp8-delayed) and unit (unit-fp32, unit-fp16, unit-fp8), columns
// FP32 / FP16 / FP8, cells masked-token accuracy % / bits per masked
// character ("not run" for a recipe the study left out); the paper's
// BERT-large SQuAD F1 rows above ours.
std::string bert_paper_table_md(const std::vector<RecipeSummary>& rows);

struct ReportFiles {
  std::string markdown, html;
  std::vector<std::string> figures;  // paths of the SVG files written
};
// Writes <dir>/report.md, <dir>/report.html and <dir>/figures/*.svg
// (each atomically). Throws std::runtime_error when a file cannot be written.
ReportFiles write_report(const std::string& dir, const ReportInput& input);

// Number formatting shared by the tables: "—" for NaN.
std::string fmt_fixed(double v, int decimals);

}  // namespace mantissa::report
