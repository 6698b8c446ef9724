// The outer loop around Trainer: steps up to a total, evaluation and
// checkpoint cadence, the metrics file (JSON lines) and the progress display
// (a \r-updated line on a terminal, plain log lines otherwise).
#pragma once

#include <cstdint>
#include <cstdio>
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
  int64_t log_every = 10;
  FILE* log = stdout;           // null: silent
  bool terminal = false;        // progress line with \r and ETA
  int64_t diverge_after = 20;   // stop after this many consecutive non-finite losses
};

struct RunSummary {
  int64_t steps_done = 0;
  int64_t skipped_steps = 0;
  double final_loss = 0;
  double final_loss_scale = 1;
  bool evaluated = false;
  EvalMetrics final_eval;
  bool diverged = false;
  int64_t diverged_at = 0;
  double seconds = 0;
  double mean_step_seconds = 0;  // excluding the first (warm-up) step
  double tokens_per_s = 0;
};

std::string step_metrics_json(const StepMetrics& m);
std::string eval_metrics_json(const EvalMetrics& e);

RunSummary run(Trainer& trainer, const RunOptions& options);

}  // namespace mantissa::train
