// The report's markdown tables: the main recipe table, the Fashion-MNIST
// table, and our numbers laid out like the unit-scaling paper's character-LM
// table (Blake et al. 2023) and the Scalify table (Balança et al. 2024), with
// the published numbers beside them.
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "mantissa/report/report.hpp"
#include "report_figures.hpp"
#include "report_task.hpp"

namespace mantissa::report {

std::string mean_pm(const MeanStd& m, int decimals) {
  if (m.n == 0) return "—";
  std::string s = fmt_fixed(m.mean, decimals);
  if (m.n >= 2) s += " ± " + fmt_fixed(m.std, decimals);
  return s;
}

namespace {

std::string signed_fixed(double v, int decimals, const char* unit) {
  if (!std::isfinite(v)) return "—";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.*f%s", decimals, v, unit);
  return buf;
}

std::string mib(double bytes) { return std::isfinite(bytes) ? fmt_fixed(bytes / (1024.0 * 1024.0), 1) : "—"; }

std::string diverged_cell(const RecipeSummary& s) {
  if (s.finished == 0) return "—";
  if (s.diverged == 0) return "no";
  std::string c = s.diverged == s.finished ? "**yes**" : "**" + std::to_string(s.diverged) + "/" + std::to_string(s.finished) + " seeds**";
  if (s.first_diverged_at > 0) c += " (step " + std::to_string(s.first_diverged_at) + ")";
  return c;
}

// Markdown cells cannot hold '|' or newlines.
std::string cell_text(std::string s) {
  for (char& ch : s)
    if (ch == '|' || ch == '\n') ch = ' ';
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return s;
}

std::string unavailable_row(const RecipeSummary& s, int columns) {
  std::string row = "| " + s.recipe + " | " + (s.status == "not-available" ? "not available" : "failed") + ": " +
                    cell_text(s.note) + " |";
  for (int i = 2; i < columns; ++i) row += " |";
  return row + "\n";
}

const RecipeSummary* find(const std::vector<RecipeSummary>& rows, const std::string& task, const std::string& recipe) {
  for (const auto& s : rows)
    if (s.task == task && s.recipe == recipe) return &s;
  return nullptr;
}

// Our value for a recipe in a comparison table (of the language model's papers).
std::string ours(const std::vector<RecipeSummary>& rows, const std::string& recipe, bool train_loss) {
  const RecipeSummary* s = find(rows, task_id(nn::Task::language_model), recipe);
  if (!s) return "not run";
  if (s->finished == 0) return s->status == "not-available" ? "n/a" : "failed";
  const MeanStd& m = train_loss ? s->train_loss : s->metric;
  if (m.n == 0) return "diverged";
  std::string c = mean_pm(m, train_loss ? 3 : 3);
  if (s->diverged > 0) c += " (" + std::to_string(s->diverged) + " diverged)";
  return c;
}

}  // namespace

namespace {

// The columns that differ between the tasks' tables.
struct TableLayout {
  nn::Task task;
  std::string header;       // the header row
  int metric_decimals;
  const char* gap_unit;     // " %" (relative) or "" (accuracy points)
  int step_ms_decimals;
  bool masked_accuracy = false;  // a column after the gap (BERT)
  std::string id;           // the rows' task id; empty: the byte-level task's (nn::task_info(task))
};

std::string recipe_table_md(const std::vector<RecipeSummary>& rows, const TableLayout& t) {
  std::ostringstream o;
  const int columns = t.masked_accuracy ? 9 : 8;
  o << t.header;
  for (int i = 0; i < columns; ++i) o << "|---";
  o << "|\n";
  const std::string& id = t.id.empty() ? nn::task_info(t.task).id : t.id;
  for (const auto& s : rows) {
    if (s.task != id) continue;
    if (s.finished == 0) {
      o << unavailable_row(s, columns);
      continue;
    }
    o << "| " << s.recipe << " | " << mean_pm(s.metric, t.metric_decimals) << " | " << signed_fixed(s.gap_pct, 2, t.gap_unit);
    if (t.masked_accuracy) o << " | " << mean_pm(s.masked_accuracy, 2);
    o << " | " << diverged_cell(s) << " | "
      << fmt_fixed(s.skipped_steps, s.skipped_steps == std::floor(s.skipped_steps) ? 0 : 1) << " | "
      << fmt_fixed(s.step_ms, t.step_ms_decimals) << " | " << fmt_fixed(s.tokens_per_s, 0) << " | "
      << mib(s.peak_memory_bytes) << " |\n";
  }
  return o.str();
}

}  // namespace

std::string main_table_md(const std::vector<RecipeSummary>& rows) {
  return recipe_table_md(rows, {nn::Task::language_model,
                                "| recipe | val bpc (mean ± std) | gap to fp32 | diverged | skipped steps | step time (ms) | "
                                "tokens/s | peak memory (MiB) |\n",
                                3, " %", 1, false, ""});
}

std::string token_table_md(const std::vector<RecipeSummary>& rows, const nn::TaskInfo& task) {
  const bool masked = task.task == nn::Task::masked_language_model;
  return recipe_table_md(rows, {task.task,
                                "| recipe | " + task.metric_name + " (mean ± std) | gap to fp32 | " +
                                    (masked ? "masked-token accuracy % | " : "") +
                                    "diverged | skipped steps | step time (ms) | tokens/s | peak memory (MiB) |\n",
                                task.metric_decimals, " %", 1, masked, task.id});
}

std::string mlp_table_md(const std::vector<RecipeSummary>& rows) {
  return recipe_table_md(rows, {nn::Task::classifier,
                                "| recipe | test accuracy % (mean ± std) | gap to fp32 (points) | diverged | skipped steps | "
                                "step time (ms) | examples/s | peak memory (MiB) |\n",
                                2, "", 2, false, ""});
}

std::string bert_table_md(const std::vector<RecipeSummary>& rows) {
  return recipe_table_md(rows, {nn::Task::masked_language_model,
                                "| recipe | bits per masked character (mean ± std) | gap to fp32 | masked-token accuracy % | "
                                "diverged | skipped steps | step time (ms) | tokens/s | peak memory (MiB) |\n",
                                3, " %", 1, true, ""});
}

std::string unit_paper_table_md(const std::vector<RecipeSummary>& rows, bool post_norm) {
  struct Column {
    const char* title;
    const char* recipe;
    const char* post_norm;
    const char* pre_norm;
  };
  // Published: Blake et al. 2023, character LM on WikiText-103 raw, test bpc
  // (median over seeds, 95% CI 0.010); the paper has no FP8 column for it.
  const Column cols[] = {
      {"FP16 regular, no loss scale", "fp16-amp-noscale", "1.660", "1.661"},
      {"FP16 unit", "unit-fp16", "1.540", "1.567"},
      {"FP16 regular, loss scale", "fp16-amp", "1.555", "1.587"},
      {"FP32 regular", "fp32", "1.548", "1.582"},
      {"FP32 unit", "unit-fp32", "1.540", "1.562"},
      {"FP8 regular, no scaling", "fp8-noscale", "—", "—"},
      {"FP8 regular, per-tensor scaling", "fp8-delayed", "—", "—"},
      {"FP8 unit", "unit-fp8", "—", "—"},
  };
  std::ostringstream o;
  o << "| model |";
  for (const auto& c : cols) o << " " << c.title << " |";
  o << "\n|---|";
  for (size_t i = 0; i < std::size(cols); ++i) o << "---|";
  const auto paper_row = [&](bool post) {
    o << "\n| paper: attention, " << (post ? "post" : "pre") << "-norm (WikiText-103 test bpc) |";
    for (const auto& c : cols) o << " " << (post ? c.post_norm : c.pre_norm) << " |";
  };
  const auto our_row = [&] {
    const nn::TaskInfo& lm = nn::task_info(nn::Task::language_model);
    o << "\n| mantissa: " << lm.model_title << " " << (post_norm ? "post" : "pre") << "-norm, " << lm.dataset
      << " (val bpc) |";
    for (const auto& c : cols) o << " " << ours(rows, c.recipe, false) << " |";
  };
  paper_row(true);
  if (post_norm) our_row();
  paper_row(false);
  if (!post_norm) our_row();
  o << "\n| mantissa recipe |";
  for (const auto& c : cols) o << " `" << c.recipe << "` |";
  o << "\n";
  return o.str();
}

namespace {

// One BERT cell: masked-token accuracy % / bits per masked character.
std::string bert_cell(const std::vector<RecipeSummary>& rows, const std::string& recipe) {
  const RecipeSummary* s = find(rows, task_id(nn::Task::masked_language_model), recipe);
  if (!s) return "not run";
  if (s->finished == 0) return s->status == "not-available" ? "n/a" : "failed";
  if (s->metric.n == 0) return "diverged";
  std::string c = mean_pm(s->masked_accuracy, 2) + " % / " + mean_pm(s->metric, 3);
  if (s->diverged > 0) c += " (" + std::to_string(s->diverged) + " diverged)";
  return c;
}

}  // namespace

std::string bert_paper_table_md(const std::vector<RecipeSummary>& rows) {
  struct Row {
    const char* ours;
    const char* paper;
    const char* recipes[3];
    const char* published[3];  // Blake et al. 2023, BERT-large, SQuAD v1.1 F1
  };
  const Row table[] = {
      {"regular", "regular (loss scaling in FP16 and FP8)", {"fp32", "fp16-amp", "fp8-delayed"}, {"90.9", "90.93", "90.69"}},
      {"unit", "unit", {"unit-fp32", "unit-fp16", "unit-fp8"}, {"—", "92.14", "91.77"}},
  };
  std::ostringstream o;
  o << "| model | FP32 | FP16 | FP8 |\n|---|---|---|---|\n";
  for (const auto& r : table)
    o << "| paper: BERT-large " << r.paper << ", SQuAD v1.1 F1 (another task and metric) | "
      << r.published[0] << " | " << r.published[1] << " | " << r.published[2] << " |\n";
  const std::string& model = nn::task_info(nn::Task::masked_language_model).model_title;
  for (const auto& r : table)
    o << "| mantissa: " << model << " " << r.ours << ", masked-token accuracy % / bits per masked character | "
      << bert_cell(rows, r.recipes[0]) << " | " << bert_cell(rows, r.recipes[1]) << " | " << bert_cell(rows, r.recipes[2])
      << " |\n";
  for (const auto& r : table)
    o << "| mantissa recipe, " << r.ours << " | `" << r.recipes[0] << "` | `" << r.recipes[1] << "` | `" << r.recipes[2]
      << "` |\n";
  return o.str();
}

std::string scalify_table_md(const std::vector<RecipeSummary>& rows) {
  struct Row {
    const char* config;
    const char* published;
    const char* recipe;
  };
  const Row table[] = {
      {"FP32", "2.87", "fp32"},
      {"FP16 matmul + FP16 gradients", "2.87", "scalify-fp16"},
      {"+ FP16 master weights, rescale on LayerNorm backward", "2.92", "scalify-fp16-master"},
      {"FP8 matmul + FP8 gradients", "2.92", "scalify-fp8"},
      {"+ FP16 optimizer state, rescaled gradients", "2.93", "scalify-fp8-fp16state"},
  };
  std::ostringstream o;
  o << "| configuration | published: training loss (GPT-2-like 168M, WikiText-103) | mantissa recipe | "
       "mantissa: final training loss (nats) | mantissa: val bpc |\n"
       "|---|---|---|---|---|\n";
  for (const auto& r : table)
    o << "| " << r.config << " | " << r.published << " | `" << r.recipe << "` | " << ours(rows, r.recipe, true) << " | "
      << ours(rows, r.recipe, false) << " |\n";
  return o.str();
}

}  // namespace mantissa::report
