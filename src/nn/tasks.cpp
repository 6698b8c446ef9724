#include "mantissa/nn/tasks.hpp"

#include <cmath>

namespace mantissa::nn {

const std::vector<TaskInfo>& task_infos() {
  static const std::vector<TaskInfo> tasks = {
      {.task = Task::language_model,
       .id = "gpt",
       .model_title = "GPT",
       .title = "Character-level GPT",
       .dataset = "Jane Austen",
       .default_data = "austen.txt",
       .data_flag = "--data",
       .metric_short = "val bpc",
       .metric_name = "val bpc",
       .metric_label = "validation bits per character",
       .metric_unit = "",
       .lower_is_better = true,
       .metric_decimals = 3,
       .divergence_threshold = 8,
       .threshold_text = "8 bits per byte",
       .curve_title = "Validation bits per character",
       .curve_label = "validation bits per character",
       .curve_figure = "val_curves.svg",
       .curve_caption = "Validation bits per character of every recipe (unit-scaled recipes dashed)",
       .sweep_title = "validation bits per character"},
      {.task = Task::masked_language_model,
       .id = "bert",
       .model_title = "BERT",
       .title = "BERT masked LM",
       .dataset = "Jane Austen",
       .default_data = "austen.txt",
       .data_flag = "--data",
       .metric_short = "bits per masked char",
       .metric_name = "bits per masked character",
       .metric_label = "bits per masked character",
       .metric_unit = "",
       .lower_is_better = true,
       .metric_decimals = 3,
       .divergence_threshold = 8,
       .threshold_text = "8 bits per byte",
       .curve_title = "BERT: validation bits per masked character",
       .curve_label = "bits per masked character",
       .curve_figure = "bert_curves.svg",
       .curve_caption = "BERT: validation bits per masked character of every recipe (unit-scaled recipes dashed)",
       .sweep_title = "BERT bits per masked character"},
      // The causal and masked LMs on token data (tokens.hpp): the loss in nats
      // per token; diverged above ln V nats, guessing uniformly over the run's
      // vocabulary (a per-run threshold, report::RunResult::divergence_threshold).
      {.task = Task::language_model,
       .id = "lm-tokens",
       .model_title = "language model",
       .title = "Language model on token data",
       .dataset = "the token data",
       .default_data = "",
       .data_flag = "--data",
       .metric_short = "val nats/token",
       .metric_name = "val nats per token",
       .metric_label = "validation nats per token",
       .metric_unit = "",
       .lower_is_better = true,
       .metric_decimals = 4,
       .divergence_threshold = std::nan(""),
       .threshold_text = "ln V nats (V the vocabulary size)",
       .curve_title = "Validation nats per token",
       .curve_label = "validation nats per token",
       .curve_figure = "val_curves_tokens.svg",
       .curve_caption = "Validation nats per token of every recipe (unit-scaled recipes dashed)",
       .sweep_title = "validation nats per token",
       .token_data = true},
      {.task = Task::masked_language_model,
       .id = "mlm-tokens",
       .model_title = "BERT",
       .title = "BERT masked LM on token data",
       .dataset = "the token data",
       .default_data = "",
       .data_flag = "--data",
       .metric_short = "nats per masked token",
       .metric_name = "nats per masked token",
       .metric_label = "nats per masked token",
       .metric_unit = "",
       .lower_is_better = true,
       .metric_decimals = 4,
       .divergence_threshold = std::nan(""),
       .threshold_text = "ln V nats (V the vocabulary size)",
       .curve_title = "BERT: validation nats per masked token",
       .curve_label = "nats per masked token",
       .curve_figure = "bert_curves_tokens.svg",
       .curve_caption = "BERT: validation nats per masked token of every recipe (unit-scaled recipes dashed)",
       .sweep_title = "BERT nats per masked token",
       .token_data = true},
      // Ranked by test accuracy; diverged when the test loss exceeds ln 10
      // nats, the loss of guessing one of the 10 classes uniformly.
      {.task = Task::classifier,
       .id = "mlp",
       .model_title = "MLP",
       .title = "Fashion-MNIST MLP",
       .dataset = "Fashion-MNIST",
       .default_data = "fashion-mnist",
       .data_flag = "--mlp-data",
       .metric_short = "test accuracy",
       .metric_name = "test accuracy",
       .metric_label = "test accuracy",
       .metric_unit = "%",
       .lower_is_better = false,
       .metric_decimals = 2,
       .divergence_threshold = std::log(10.0),
       .threshold_text = "ln 10 nats",
       .curve_title = "Fashion-MNIST test loss",
       .curve_label = "test loss (nats)",
       .curve_figure = "mlp_curves.svg",
       .curve_caption = "Fashion-MNIST test loss of every recipe",
       .sweep_title = "Fashion-MNIST test accuracy"},
  };
  return tasks;
}

const TaskInfo& task_info(Task task) {
  for (const TaskInfo& t : task_infos())
    if (t.task == task) return t;
  return task_infos().front();
}

const TaskInfo& task_info(const std::string& id) {
  for (const TaskInfo& t : task_infos())
    if (t.id == id) return t;
  return task_info(Task::language_model);
}

const TaskInfo& task_info(Task task, bool token_data) {
  for (const TaskInfo& t : task_infos())
    if (t.task == task && t.token_data == token_data) return t;
  return task_info(task);
}

bool is_task(const std::string& id, Task task) {
  for (const TaskInfo& t : task_infos())
    if (t.id == id) return t.task == task;
  return false;
}

}  // namespace mantissa::nn
