// `mantissa train`: every setting of train::TrainConfig as a flag and as a
// key of --config FILE.json (flags win over the file).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/command.hpp"
#include "cli/train_flags.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/data/text.hpp"
#include "mantissa/kernels/matmul_route.hpp"
#include "mantissa/recipe/recipe.hpp"
#include "mantissa/dist/group.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/inspect/inspect.hpp"
#include "mantissa/train/run.hpp"
#include "mantissa/train/session.hpp"

namespace mantissa::cli {
namespace {

void train_command(CLI::App* cmd, train::TrainConfig& cfg, int64_t watch) {
  apply_train_config_file(cmd, cfg);
  if (watch < 0) throw UsageError("--watch must be >= 1 (every k-th step) or 0 (off), got " + std::to_string(watch));

  auto session = train::build_session(cfg);
  const train::TrainConfig& c = session->config;
  auto& model = *session->model;
  model.set_activation_checkpointing(static_cast<int>(c.checkpoint_activations));
  // Data parallel: rank 0 speaks and writes for the job.
  const dist::Group& group = dist::Group::world();
  if (group.rank() != 0 && !std::freopen("/dev/null", "w", stdout)) throw std::runtime_error("cannot silence stdout");
  std::printf("mantissa train: %s model, %ld parameters, recipe %s, %d threads\n", model.kind().c_str(),
              static_cast<long>(model.parameter_count()), session->recipe.name.c_str(), kernels::num_threads());
  std::printf("  cpu: kernels %s (host %s), %s\n", cpu::isa_name(cpu::active_isa()), cpu::isa_name(cpu::detected_isa()),
              kernels::matmul_route_summary().c_str());
  if (group.distributed())
    std::printf("  data parallel: %d ranks, %ld sequences each per micro-batch, gradients in %s%s\n", group.size(),
                static_cast<long>(c.batch_size / group.size()), c.comm_format.c_str(),
                c.comm_error_feedback ? " with error feedback" : "");
  const auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  if (session->trainer->sharded())
    std::printf("  sharded optimizer: optimizer state + master weights %.2f MiB on this rank (1/%d of the state)\n",
                mib(session->trainer->state_bytes()), group.size());
  std::printf("  model %s\n  data %s", nlohmann::json::parse(model.config_json()).dump().c_str(), session->data_path.c_str());
  if (session->corpus)
    std::printf(" (%ld bytes: %ld train, %ld validation)", static_cast<long>(session->corpus->size()),
                static_cast<long>(session->corpus->train_size()), static_cast<long>(session->corpus->val_size()));
  if (const auto* w = dynamic_cast<const data::TextWindows*>(session->train.get()); w && w->tokens())
    std::printf(" (%s)", w->tokens()->summary().c_str());
  std::printf("\n  %ld steps x %ld micro-batch(es) of %ld x %ld, lr %g (warm-up %ld, cosine to %g)\n",
              static_cast<long>(c.steps), static_cast<long>(c.grad_accum), static_cast<long>(c.batch_size),
              static_cast<long>(train::text_model(c.model) ? c.seq_len : 1), c.lr, static_cast<long>(c.warmup), c.min_lr);
  if (!c.resume.empty())
    std::printf("  resumed from %s at step %ld\n", c.resume.c_str(), static_cast<long>(session->trainer->step()));
  std::fflush(stdout);

  train::RunOptions ro = train::run_options(*session);
  if (group.rank() != 0) ro.metrics_path.clear();
  ro.terminal = ::isatty(::fileno(stdout)) != 0;
  std::unique_ptr<inspect::Watch> watcher;
  if (watch > 0) {
    watcher = std::make_unique<inspect::Watch>(model, watch, inspect::kWatchValues, inspect::VerdictOptions{}, stdout,
                                             session->optimizer.get());
    ro.before_step = [&](int64_t step) { watcher->before_step(step); };
    ro.after_step = [&](const train::StepMetrics& m) { watcher->after_step(m.step); };
  }
  const train::RunSummary s = train::run(*session->trainer, ro);
  if (watcher) {
    const auto ranked = watcher->verdicts().ranking();
    std::printf("watch: %zu warning(s); worst cast sites (every %ld-th step):\n%s", watcher->verdicts().warnings().size(),
                static_cast<long>(watch), inspect::ranking_table(ranked, 5).c_str());
  }
  std::printf("done: %ld steps in %.1f s, %.0f tokens/s (%.1f ms/step), %ld skipped, final loss scale %g\n",
              static_cast<long>(s.steps_done), s.seconds, s.tokens_per_s, s.mean_step_seconds * 1e3,
              static_cast<long>(s.skipped_steps), s.final_loss_scale);
  std::printf("memory: optimizer state + master weights %.2f MiB per rank%s\n", mib(s.state_bytes),
              session->trainer->sharded() ? " (sharded)" : "");
  if (s.diverged) {
    std::printf("DIVERGED at step %ld\n", static_cast<long>(s.diverged_at));
    std::fflush(stdout);
    throw std::runtime_error("training diverged at step " + std::to_string(s.diverged_at) + " (" + s.diverged_reason +
                             ")" + (c.save.empty() ? "" : "; " + c.save + " was not overwritten"));
  }
  if (s.evaluated && s.final_eval.masked_accuracy >= 0)  // masked LM: per masked character or token
    std::printf("final: train loss %.4f  val_loss %.4f  val_bits_per_masked_%s %.4f  val_masked_accuracy %.4f\n",
                s.final_loss, s.final_eval.val_loss, session->val->per_token() ? "token" : "char",
                s.final_eval.val_bpc, s.final_eval.masked_accuracy);
  else if (s.evaluated && session->val->per_token() && s.steps_run > 0)  // token data: nats and bits per token
    std::printf("final: train loss %.4f  val_loss %.4f nats/token  val_bits_per_token %.4f\n", s.final_loss,
                s.final_eval.val_loss, s.final_eval.val_bpc);
  else if (s.evaluated && session->val->per_token())
    std::printf("final: val_loss %.4f nats/token  val_bits_per_token %.4f (no steps to run)\n", s.final_eval.val_loss,
                s.final_eval.val_bpc);
  else if (s.evaluated && s.steps_run > 0)
    std::printf("final: train loss %.4f  val_loss %.4f  val_bpc %.4f\n", s.final_loss, s.final_eval.val_loss,
                s.final_eval.val_bpc);
  else if (s.evaluated)
    std::printf("final: val_loss %.4f  val_bpc %.4f (no steps to run)\n", s.final_eval.val_loss, s.final_eval.val_bpc);
  std::fflush(stdout);
  // Loss scaling that skips every step trains nothing: say so and fail, so a
  // script does not take the unchanged model for a trained one.
  if (s.steps_run > 0 && s.skipped_this_run == s.steps_run)
    throw std::runtime_error("all " + std::to_string(s.steps_run) +
                             " steps were skipped (gradients not finite at every loss scale tried): the model did "
                             "not change; lower --init-scale or use another recipe");
  if (s.skipped_this_run * 2 > s.steps_run)
    std::fprintf(stderr, "mantissa: warning: %ld of %ld steps were skipped by loss scaling\n",
                 static_cast<long>(s.skipped_this_run), static_cast<long>(s.steps_run));
}

Registrar reg(30, [](CLI::App& app) {
  auto* cmd = app.add_subcommand("train",
                                 "train a GPT or Llama (byte-level text or token files), a BERT (byte-level text) or "
                                 "an MLP (Fashion-MNIST) under a recipe");
  auto cfg = std::make_shared<train::TrainConfig>();
  add_train_flags(cmd, *cfg);
  auto watch = std::make_shared<int64_t>(0);
  cmd->add_option("--watch", *watch,
                  "probe every k-th step's cast sites (bare flag: 10) and warn when a site's SQNR falls below 10 dB or "
                  "it saturates repeatedly (`mantissa inspect` has the full comparison)")
      ->expected(0, 1)
      ->default_str("10");
  cmd->callback([cmd, cfg, watch] { train_command(cmd, *cfg, *watch); });
});

}  // namespace
}  // namespace mantissa::cli
