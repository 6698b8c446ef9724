// The outer loop around Trainer: steps up to a total, evaluation and
// checkpoint cadence, the metrics file (JSON lines) and the progress display
// (a \r-updated line on a terminal, plain log lines otherwise).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "mantissa/train/trainer.hpp"

namespace mantissa::train {

// The first bytes of every metrics file mantissa writes (the run line):
// only such a file is ever replaced or appended to.
inline constexpr const char* kMetricsSignature = "{\"run\":";

struct RunOptions {
  int64_t steps = 0;       // total to reach (a resumed trainer starts at its step)
  int64_t eval_every = 0;  // 0: evaluate only at the end
  int64_t save_every = 0;  // 0: save only at the end (when save_dir is set)
  std::string save_dir;
  std::string metrics_path;     // empty: no metrics file
  bool append_metrics = false;  // resuming: keep the earlier lines
  std::string run_info_json;    // written as the first metrics line ({"run": ...}) if set
  bool per_token = false;       // token data: evaluations in nats and bits per token, not val_bpc
  int64_t log_every = 10;
  FILE* log = stdout;           // null: silent
  bool terminal = false;        // progress line with \r and ETA
  int64_t diverge_after = 20;   // stop after this many consecutive non-finite losses
  // Called with each metrics record (one JSON object, as a line of the file),
  // whether or not there is a file; an exception it throws ends the run.
  std::function<void(const std::string&)> on_record;
  // Called around every step (e.g. train --watch); step = the one about to run, 1-based.
  std::function<void(int64_t step)> before_step;
  std::function<void(const StepMetrics&)> after_step;
};

struct RunSummary {
  int64_t steps_done = 0;
  int64_t skipped_steps = 0;
  double final_loss = 0;
  double final_loss_scale = 1;
  bool evaluated = false;
  EvalMetrics final_eval;
  int64_t steps_run = 0;         // steps of this call (steps_done less the resumed step)
  int64_t skipped_this_run = 0;  // of steps_run, skipped by loss scaling
  bool diverged = false;         // non-finite loss for diverge_after steps, or a non-finite tensor at a save
  int64_t diverged_at = 0;
  std::string diverged_reason;
  double seconds = 0;
  double mean_step_seconds = 0;  // excluding the first (warm-up) step
  double tokens_per_s = 0;
  int64_t state_bytes = 0;       // optimizer state + separate master weights held by this process
};

std::string step_metrics_json(const StepMetrics& m);
std::string eval_metrics_json(const EvalMetrics& e);

RunSummary run(Trainer& trainer, const RunOptions& options);

}  // namespace mantissa::train
