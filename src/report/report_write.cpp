// Assembles report.md (tables, figures, how it was run) and report.html
// (the same, figures inline), writing every file atomically.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "mantissa/io/files.hpp"
#include "mantissa/report/report.hpp"
#include "report_figures.hpp"
#include "report_fp4.hpp"
#include "report_inspect.hpp"
#include "report_task.hpp"

namespace mantissa::report {

namespace fs = std::filesystem;

namespace {

std::string figure_md(const std::string& caption, const std::string& path) {
  return "![" + caption + "](" + path + ")\n\n";
}

std::string reading_notes(const std::vector<RecipeSummary>& rows) {
  const nn::TaskInfo& text = nn::task_info(nn::Task::language_model);
  const nn::TaskInfo& image = nn::task_info(nn::Task::classifier);
  std::ostringstream o;
  o << "- val bpc: validation bits per character on the held-out end of the corpus, after the same number of "
       "tokens in the same data order for every recipe; mean ± sample standard deviation (n - 1) over the seeds "
       "that did not diverge.\n"
       "- gap to fp32: (recipe mean - fp32 mean) / fp32 mean. diverged: the trainer stopped on non-finite losses, "
       "or the final validation loss is non-finite or worse than guessing uniformly ("
    << text.threshold_text << "; " << image.threshold_text << " for " << image.dataset << ").\n"
       "- skipped steps: optimizer steps skipped for non-finite gradients (dynamic loss scaling backs off on those). "
       "step time excludes the first step; peak memory is the largest peak of mantissa's counted allocator "
       "(parameters, gradients, optimizer state, activations, workspace) over the seeds.\n";
  int unavailable = 0;
  for (const auto& s : rows) unavailable += s.finished == 0;
  if (unavailable)
    o << "- " << unavailable << " recipe(s) of the preset are not available in this build and are listed as such.\n";
  return o.str();
}

void write_kv_table(std::ostringstream& o, const std::map<std::string, std::string>& kv) {
  o << "| | |\n|---|---|\n";
  for (const auto& [k, v] : kv) {
    std::string cell = v;
    for (char& c : cell)
      if (c == '|' || c == '\n') c = ' ';
    o << "| " << k << " | " << cell << " |\n";
  }
  o << "\n";
}

std::string grad_what(const std::vector<RunResult>& runs) {
  for (const auto& r : runs)
    if (!r.grad_exponents.empty()) {
      const auto& e = r.grad_exponents.front();
      int64_t n = e.zeros + e.nonfinite;
      for (int64_t c : e.counts) n += c;
      return e.what + ", " + std::to_string(n) + " values";
    }
  return {};
}

}  // namespace

ReportFiles write_report(const std::string& dir, const ReportInput& in) {
  ReportFiles files;
  const fs::path root(dir);
  std::error_code ec;
  fs::create_directories(root / "figures", ec);
  if (ec) throw std::runtime_error("cannot create " + (root / "figures").string() + ": " + ec.message());

  // A learning-rate sweep: every table shows each recipe at its own best rate.
  const std::vector<SweepCurve> sweep = lr_sweep(in.runs);
  const bool swept = is_sweep(sweep);
  std::vector<RunResult> shown = swept ? at_best_rate(in.runs, sweep) : in.runs;
  // A study over widths (of the language model): the recipe tables show the widest.
  const std::string& lm = task_id(nn::Task::language_model);
  const std::vector<int64_t> widths = sweep_widths(sweep, lm);
  if (widths.size() > 1)
    shown.erase(std::remove_if(shown.begin(), shown.end(),
                               [&](const RunResult& r) { return r.task == lm && r.d_model != widths.back(); }),
                shown.end());
  const std::vector<RecipeSummary> rows = summarize(shown);
  std::vector<std::pair<std::string, std::string>> svgs;  // (relative path, svg text)
  auto add_figure = [&](const std::string& name, const std::string& svg) {
    const std::string rel = "figures/" + name;
    write_svg((root / rel).string(), svg);
    files.figures.push_back((root / rel).string());
    svgs.emplace_back(rel, svg);
    return rel;
  };

  // Byte-level tasks by their exact id: the token-data tasks have sections of their own.
  auto any = [&](nn::Task task) {
    return std::any_of(rows.begin(), rows.end(),
                       [&](const RecipeSummary& s) { return s.task == nn::task_info(task).id; });
  };
  const bool any_gpt = any(nn::Task::language_model);

  std::ostringstream md;
  md << "# " << in.title << "\n\n";
  if (in.interrupted)
    md << "**Interrupted**: this report shows the runs that finished before the study was stopped; rerun the "
          "same command with `--resume` to complete it.\n\n";
  if (!in.preset.empty()) md << "Preset `" << in.preset << "`. ";
  md << "Every recipe trains the same model on the same data in the same order for the same number of tokens; "
        "only the precision recipe (and the learning rate its parametrisation needs) changes.\n\n";
  for (const auto& n : in.notes) md << "- " << n << "\n";
  if (!in.notes.empty()) md << "\n";

  if (swept) {
    md << "## Learning-rate sweep\n\n"
          "Each recipe trained at every rate of the sweep; its best rate is the one with the lowest mean val bpc "
          "(highest test accuracy) among rates where every seed finished without diverging. The gap compares each "
          "recipe at its own best rate with fp32 at fp32's best rate, and every table below shows the runs at the "
          "recipe's best rate.\n\n";
    for (const nn::TaskInfo& info : nn::task_infos()) {
      const std::string& task = info.id;
      const std::string table = sweep_table_md(sweep, task);
      if (table.empty()) continue;
      md << "### " << info.title << "\n\n" << table << "\n";
      if (sweep_widths(sweep, task).size() > 1) {
        std::vector<std::string> recipes;
        for (const SweepCurve& c : sweep)
          if (c.task == task && std::find(recipes.begin(), recipes.end(), c.recipe) == recipes.end()) recipes.push_back(c.recipe);
        for (const std::string& recipe : recipes)
          if (auto p = transfer_plot(sweep, task, recipe))
            md << figure_md(recipe + ": final val bpc against log2 learning rate, one line per d_model (the best rate "
                                     "transfers across widths when the minima line up)",
                            add_figure(std::string(task) + "_transfer_" + recipe + ".svg", render(*p)));
        md << "The recipe tables below show the widest model (d_model " << widths.back()
           << ") at each recipe's best rate.\n\n";
      } else if (auto p = sweep_plot(sweep, task))
        md << figure_md("Final " + info.metric_name +
                            " against log2 learning rate, one line per recipe (unit-scaled recipes dashed)",
                        add_figure(std::string(task) + "_lr_sweep.svg", render(*p)));
    }
  }
  // One section per task, each laid out for it (its tables, and the papers' tables beside the language models').
  const nn::TaskInfo& text = nn::task_info(nn::Task::language_model);
  const nn::TaskInfo& masked = nn::task_info(nn::Task::masked_language_model);
  const nn::TaskInfo& image = nn::task_info(nn::Task::classifier);
  if (any_gpt) {
    md << "## " << text.title << ": recipe by recipe\n\n" << main_table_md(rows) << "\n" << reading_notes(rows) << "\n";
    md << fp4_section_md(shown);
    md << "### Laid out like the unit-scaling paper (Blake et al. 2023, character LM)\n\n"
       << unit_paper_table_md(rows, in.post_norm)
       << "\nPublished numbers are WikiText-103 test bits per character of much larger, longer-trained models "
          "(median over seeds, 95% CI 0.010); ours are a small "
       << text.model_title << " on " << text.dataset << ", so compare the *shape* (which "
          "columns match FP32 and which fall behind), not the values. The paper's FP8 results are for BERT-large on "
          "SQuAD v1.1 (F1: FP32 90.9, FP8 with loss scaling 90.69, FP8 unit 91.77), so its FP8 columns here are "
          "empty. Paper best learning rates: regular AdamW 2^-10, unit AdamW 2^-6.\n\n";
    md << "### Laid out like the Scalify table (scale propagation)\n\n"
       << scalify_table_md(rows)
       << "\nScalify reports the final training loss of a 168M-parameter GPT-2-like model on WikiText-103 with "
          "a GPT-2 tokenizer; ours is the final training loss (nats per byte) of a small byte-level "
       << text.model_title << ", so again "
          "compare gaps to FP32, not values.\n\n";
  }
  if (any(nn::Task::masked_language_model))
    md << "## " << masked.title << ": recipe by recipe\n\n" << bert_table_md(rows)
       << "\nBits per masked character: the validation loss per masked byte / ln 2 (lower is better; the gap is "
          "relative to fp32); masked-token accuracy: the share of masked positions whose arg-max prediction is the "
          "original byte.\n\n"
       << "### Laid out like the unit-scaling paper (Blake et al. 2023, BERT)\n\n"
       << bert_paper_table_md(rows)
       << "\nThe paper's numbers are SQuAD v1.1 F1 of BERT-large trained at each precision; "
          "ours are masked-token accuracy and bits per masked character of a small byte-level "
       << masked.model_title << " pre-trained on " << masked.dataset
       << ", a different task and metric: compare the *shape* (which precisions match FP32 in each row), "
          "not the values. The paper's regular FP8 run uses a loss scale; mantissa's regular FP8 column is "
          "`fp8-delayed` (per-tensor scales, see docs/bert.md). Only the paper's BERT-large SQuAD v1.1 F1 values are "
          "shown (no unit FP32 value among them).\n\n";
  for (const nn::Task task : {nn::Task::language_model, nn::Task::masked_language_model}) {
    const nn::TaskInfo& tokens = nn::task_info(task, true);
    if (std::none_of(rows.begin(), rows.end(), [&](const RecipeSummary& s) { return s.task == tokens.id; })) continue;
    md << "## " << tokens.title << ": recipe by recipe\n\n" << token_table_md(rows, tokens)
       << "\n- " << tokens.metric_name << ": the validation loss in nats per "
       << (task == nn::Task::masked_language_model ? "masked " : "")
       << "token on the validation split, after the same number of tokens in the same data order for every recipe; "
          "mean ± sample standard deviation (n - 1) over the seeds that did not diverge. The gap is relative to "
          "fp32's. diverged: non-finite losses, or a final loss above "
       << tokens.threshold_text << ", guessing uniformly over the vocabulary.\n\n";
  }
  if (any(nn::Task::classifier)) md << "## " << image.title << "\n\n" << mlp_table_md(rows) << "\n";

  md << "## Figures\n\n";
  for (const nn::TaskInfo& info : nn::task_infos())
    if (auto p = validation_curves(shown, info.id))
      md << figure_md(info.curve_caption, add_figure(info.curve_figure, render(*p)));
  if (auto p = gradient_exponent_plot(shown))
    md << figure_md("Histogram of gradient exponents against the FP16 and FP8 ranges (Micikevicius et al. 2018): " +
                        grad_what(shown) + "; values left of a band underflow in that format without scaling",
                    add_figure("grad_exponents.svg", render(*p)));
  else if (any_gpt)
    md << "Gradient-exponent histogram: not available (it comes from the fp32 GPT run, which did not finish).\n\n";
  if (!in.scale_plot_svg.empty())
    md << figure_md("Per-op scale (RMS, log2 axis) of the standard vs the unit-scaled GPT at initialisation",
                    add_figure("scales.svg", in.scale_plot_svg));
  else if (!in.scale_plot_note.empty())
    md << "Per-op scale plot: " << in.scale_plot_note << "\n\n";
  if (auto p = loss_scale_plot(shown))
    md << figure_md("Loss scale over training for the recipes with dynamic loss scaling (fp16-amp)",
                    add_figure("loss_scale.svg", render(*p)));
  else
    md << "Loss-scale plot: no finished run used dynamic loss scaling.\n\n";
  md << inspector_section_md(in, add_figure);

  md << "## How this was run\n\n```\n" << in.command << "\n```\n\n";
  if (!in.config_json.empty()) md << "Configuration:\n\n```\n" << in.config_json << "\n```\n\n";
  md << "Versions:\n\n";
  write_kv_table(md, in.versions);
  md << "Machine:\n\n";
  write_kv_table(md, in.machine);
  md << "Per-run results (metrics JSON lines and result.json) are in `runs/<task>-<recipe>-s<seed>/`.\n";

  const std::string md_text = md.str();
  files.markdown = (root / "report.md").string();
  files.html = (root / "report.html").string();
  io::write_file_atomic(files.markdown, md_text);
  io::write_file_atomic(files.html, markdown_to_html(md_text, in.title, svgs));
  return files;
}

}  // namespace mantissa::report

