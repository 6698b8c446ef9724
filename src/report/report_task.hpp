// Internal: how the report reads a run's task (nn/tasks.hpp says what each
// task is called, how its metric is labelled and when a run diverged).
#pragma once

#include <string>

#include "mantissa/nn/tasks.hpp"
#include "mantissa/report/report.hpp"

namespace mantissa::report {

// A classifier ranks recipes by test accuracy in % and its curve and
// divergence read the test loss; the text tasks rank by bits per (masked)
// character of the validation loss.
inline bool accuracy_task(const std::string& task) { return nn::task_info(task).task == nn::Task::classifier; }

inline double metric_of(const RunResult& r) { return accuracy_task(r.task) ? 100.0 * r.accuracy : r.val_bpc; }

// The gap to the reference: accuracy points, or % of the reference's bits.
inline double gap_of(const std::string& task, double value, double reference) {
  return accuracy_task(task) ? value - reference : 100.0 * (value - reference) / reference;
}

// The study's name of the task.
inline const std::string& task_id(nn::Task task) { return nn::task_info(task).id; }

}  // namespace mantissa::report
