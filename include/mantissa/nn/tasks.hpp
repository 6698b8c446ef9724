// The library's tasks: what a model is trained to do, and how the recipe
// study names, ranks and reports it. A model kind (models.hpp) names its task;
// the study's plan, its runs and the report's tables and figures read
// everything task-specific from here, never from a model's name.
#pragma once

#include <string>
#include <vector>

namespace mantissa::nn {

enum class Task { language_model, masked_language_model, classifier };

struct TaskInfo {
  Task task;
  // The study's name of the task: run ids "<id>-<recipe>-s<seed>", result.json's
  // "task", the plan's JSON keys, figure file names.
  std::string id;
  std::string model_title;  // the model in the study's notes
  std::string title;        // headings of its tables in the report
  std::string dataset;      // the data it is measured on, in the report's prose
  std::string default_data;  // file or directory name looked up when no data is given
  std::string data_flag;     // the study's flag for its data
  // The metric recipes are ranked by: bits per (masked) character of the
  // validation loss, or test accuracy in % for a classifier.
  std::string metric_short;  // table columns, the transfer plot's title
  std::string metric_name;   // the learning-rate sweep's caption
  std::string metric_label;  // axis labels, before the unit
  std::string metric_unit;   // "" or "%"
  bool lower_is_better = true;
  int metric_decimals = 3;
  // The validation loss of guessing uniformly: above it a run has learnt
  // nothing and counts as diverged (bits per character, or nats for a
  // classifier, whose curve is its test loss); NaN: each run's own (token
  // data, ln of its vocabulary).
  double divergence_threshold = 8;
  std::string threshold_text;  // the report's reading notes
  std::string curve_title;     // validation-curve figure, before " (mean over seeds)"
  std::string curve_label;     // its y axis
  std::string curve_figure;    // its file name
  std::string curve_caption;   // its caption in report.md
  std::string sweep_title;     // learning-rate sweep figure, after "Learning-rate sweep: "
  bool token_data = false;     // the task on token data (tokens.hpp), in nats per token
};

// Every task, in the report's order.
const std::vector<TaskInfo>& task_infos();
const TaskInfo& task_info(Task task);
// The task's entry for byte-level data or for token data (tokens.hpp).
const TaskInfo& task_info(Task task, bool token_data);
// The task of this study name; the language model's for a name no task has
// (results of an unknown task are reported as text).
const TaskInfo& task_info(const std::string& id);
// `id` is the study's name of `task` (on bytes or on tokens).
bool is_task(const std::string& id, Task task);

}  // namespace mantissa::nn
