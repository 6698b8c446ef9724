// `mantissa experiment`: the side-by-side recipe study and its report
// (study/experiment.hpp, report/report.hpp).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "cli/command.hpp"
#include "mantissa/dist/group.hpp"
#include "mantissa/formats/parse_number.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/study/experiment.hpp"
#include "mantissa/train/session.hpp"

namespace mantissa::cli {
namespace {

std::vector<std::string> split_list(const std::string& s, const char* flag) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    const std::string_view name = formats::trim_blanks(item);
    if (name.empty()) throw UsageError(std::string(flag) + ": empty name in '" + s + "'");
    out.emplace_back(name);
  }
  if (out.empty()) throw UsageError(std::string(flag) + ": expects a comma-separated list of recipe names");
  return out;
}

// "gpt 2^-1, llama 2^-2, ...": each text model's default unit rate, read
// from the model registry so the help follows the models.
std::string unit_rate_defaults() {
  std::string out;
  for (const nn::ModelKind& k : nn::model_kinds()) {
    if (k.task == nn::Model::Task::classifier) continue;
    const int e = static_cast<int>(std::lround(std::log2(train::unit_default_lr(k.name))));
    out += (out.empty() ? "" : ", ") + k.name + " 2^" + std::to_string(e);
  }
  return out;
}

std::string quoted_command(int argc, char** argv) {
  std::string c;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.find_first_of(" \t'\"$") != std::string::npos) a = "'" + a + "'";
    c += (i ? " " : "") + a;
  }
  return c;
}

struct Args {
  study::ExperimentOptions o;
  std::string recipes, mlp_recipes;
};

void experiment_command(CLI::App* cmd, Args& a) {
  // Given but empty is an error, not "the preset's recipes".
  if (cmd->count("--recipes") > 0) a.o.recipes = split_list(a.recipes, "--recipes");
  if (cmd->count("--mlp-recipes") > 0) a.o.mlp_recipes = split_list(a.mlp_recipes, "--mlp-recipes");
  if (a.o.threads > 0) kernels::set_num_threads(a.o.threads);
  // Data parallel: every run trains on all ranks; rank 0 speaks and writes for the job.
  if (dist::Group::world().rank() != 0 && !std::freopen("/dev/null", "w", stdout))
    throw std::runtime_error("cannot silence stdout");
  const bool terminal = ::isatty(::fileno(stdout)) != 0;
  const auto outcome = study::run_experiment(a.o, stdout, terminal);
  std::printf("%s: %d runs trained, %d kept from earlier (--resume), %.1f s\n",
              outcome.interrupted ? "interrupted" : "done", outcome.ran, outcome.resumed, outcome.seconds);
  std::printf("report: %s\n        %s\n", outcome.report.markdown.c_str(), outcome.report.html.c_str());
  std::fflush(stdout);
  if (outcome.interrupted) std::exit(130);  // the shell convention for SIGINT
  if (outcome.failed > 0)
    throw std::runtime_error(std::to_string(outcome.failed) + " run(s) failed (their errors are above and in the report)");
}

// CLI11 gives no access to argv in callbacks: main's arguments are read back
// from /proc so the report can quote the exact command.
std::string command_line() {
  FILE* f = std::fopen("/proc/self/cmdline", "rb");
  if (!f) return "mantissa experiment";
  std::string raw;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) raw.append(buf, n);
  std::fclose(f);
  std::vector<std::string> args;
  std::vector<char*> argv;
  size_t start = 0;
  for (size_t i = 0; i < raw.size(); ++i)
    if (raw[i] == '\0') {
      args.push_back(raw.substr(start, i - start));
      start = i + 1;
    }
  for (auto& s : args) argv.push_back(s.data());
  return quoted_command(static_cast<int>(argv.size()), argv.data());
}

Registrar reg(40, [](CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "experiment", "train the same GPT (and a Fashion-MNIST MLP) under every recipe and write a report comparing them");
  auto a = std::make_shared<Args>();
  auto& o = a->o;
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag wins
  cmd->add_option("--model", o.model, "model of the text task: gpt, llama (same sizes and recipes) or bert (masked LM, its own table)")->capture_default_str();
  cmd->add_option("--norm", o.norm, "gpt, bert: pre or post-norm blocks (default: gpt pre, bert post)");
  cmd->add_option("--preset", o.preset, "quick (smaller GPT, 1 seed: about 2 minutes on 2 idle cores) or paper (reference GPT, 3 seeds, every recipe: about 1.5 hours) or fp4 (the FP4 ablation on the reference GPT) or transfer (the best learning rate of the standard model and u-muP at d_model 64 to 512)")
      ->check(CLI::IsMember(study::preset_names()));
  cmd->add_option("--recipes", a->recipes, "comma-separated GPT recipes (default: the preset's)");
  cmd->add_option("--mlp-recipes", a->mlp_recipes,
                  "comma-separated Fashion-MNIST MLP recipes, or none (default: fp32,bf16-amp,fp16-amp-noscale,unit-fp8,scalify-fp8)");
  cmd->add_option("--seeds", o.seeds, "seeds per recipe (default: the preset's)")->check(positive_number())->check(exact_integer<int64_t>());
  cmd->add_option("--tokens", o.tokens, "GPT training tokens per run (default: the preset's)")->check(positive_number())->check(exact_integer<int64_t>());
  cmd->add_option("--out", o.out, "report directory (default: report)");
  cmd->add_option("--data", o.data, "text corpus for the GPT (default: Jane Austen, .cache/data/austen.txt), or token "
                                    "data (llm.c / nanoGPT files: the tables in nats per token)");
  cmd->add_option("--init-from", o.init_from, "fine-tune this model directory (mantissa's save or transformers' "
                                              "save_pretrained) under every recipe; its config.json fixes the model");
  cmd->add_option("--vocab-size", o.vocab_size, "vocabulary of a text model trained from scratch on token data")
      ->check(positive_number())->check(exact_integer<int64_t>());
  cmd->add_option("--mlp-data", o.mlp_data, "Fashion-MNIST directory (default: .cache/data/fashion-mnist)");
  cmd->add_flag("--resume", o.resume, "keep runs that finished in an earlier invocation with the same settings");
  cmd->add_option("--threads", o.threads, "compute threads (default: the library's)")->check(positive_number())->check(exact_integer<int64_t>());
  cmd->add_option("--layers", o.layers, "GPT blocks (default: the preset's)")->check(positive_number())->check(exact_integer<int64_t>());
  cmd->add_option("--d-model", o.d_model, "GPT width (default: the preset's)")->check(positive_number())->check(exact_integer<int64_t>());
  cmd->add_option("--heads", o.heads, "GPT attention heads (default: the preset's)")->check(positive_number())->check(exact_integer<int64_t>());
  cmd->add_option("--seq-len", o.seq_len, "GPT context length (default: the preset's)")->check(positive_number())->check(exact_integer<int64_t>());
  cmd->add_option("--batch-size", o.batch_size, "GPT windows per step (default: the preset's)")->check(positive_number())->check(exact_integer<int64_t>());
  cmd->add_option("--mlp-steps", o.mlp_steps, "MLP optimizer steps (default: the preset's)")->check(positive_number())->check(exact_integer<int64_t>());
  cmd->add_option("--lr-standard", o.lr_standard, "GPT learning rate of standard recipes (default 2^-10)")
      ->check(positive_number());
  cmd->add_option("--lr-sweep", o.lr_sweep,
                  "train every GPT recipe at each rate START:STOP:STEP (STEP in octaves; 2^E or decimals, e.g. "
                  "2^-12:2^1:1) or of a comma-separated list, and report each recipe at its best rate");
  cmd->add_option("--widths", o.widths, "comma-separated GPT widths (d_model) of a width study (default: the preset's; "
                                        "transfer: 64,128,256,512)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(positive_number());
  cmd->add_flag("!--no-inspect", o.inspect, "skip the inspector section (inspect on recipes that fell behind fp32)");
  cmd->add_option("--inspect-gap", o.inspect_gap_pct, "inspect GPT recipes whose val bpc is more than this % behind fp32, or diverged (default 2)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--inspect-steps", o.inspect_steps, "steps of each inspection (default 25)")->check(positive_number())->check(exact_integer<int64_t>());
  cmd->add_option("--lr-unit", o.lr_unit, "text-model learning rate of unit-scaled recipes (default: the model's own: " + unit_rate_defaults() + ")")->check(positive_number());
  cmd->callback([cmd, a] {
    a->o.command = command_line();
    experiment_command(cmd, *a);
  });
});

}  // namespace
}  // namespace mantissa::cli
