// `mantissa train`: every setting of train::TrainConfig as a flag and as a
// key of --config FILE.json (flags win over the file).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/command.hpp"
#include "mantissa/amp/recipe.hpp"
#include "mantissa/dist/group.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/gpt.hpp"
#include "mantissa/train/run.hpp"
#include "mantissa/train/session.hpp"

namespace mantissa::cli {
namespace {

void train_command(CLI::App* cmd, train::TrainConfig& cfg) {
  std::set<std::string> given;
  for (auto& k : train::config_keys(cfg))
    if (cmd->count("--" + k.key) > 0) given.insert(k.key);
  if (!cfg.config.empty()) train::apply_config_file(cfg, cfg.config, given);

  auto session = train::build_session(cfg);
  const train::TrainConfig& c = session->config;
  auto& model = *session->model;
  if (auto* gpt = dynamic_cast<nn::GPT*>(&model)) gpt->set_activation_checkpointing(static_cast<int>(c.checkpoint_activations));
  // Data parallel: rank 0 speaks and writes for the job.
  const dist::Group& group = dist::Group::world();
  if (group.rank() != 0 && !std::freopen("/dev/null", "w", stdout)) throw std::runtime_error("cannot silence stdout");
  std::printf("mantissa train: %s model, %ld parameters, recipe %s, %d threads\n", model.kind().c_str(),
              static_cast<long>(model.parameter_count()), session->recipe.name.c_str(), kernels::num_threads());
  if (group.distributed())
    std::printf("  data parallel: %d ranks, %ld sequences each per micro-batch, gradients in %s%s\n", group.size(),
                static_cast<long>(c.batch_size / group.size()), c.comm_format.c_str(),
                c.comm_error_feedback ? " with error feedback" : "");
  std::printf("  model %s\n  data %s", nlohmann::json::parse(model.config_json()).dump().c_str(), session->data_path.c_str());
  if (session->corpus)
    std::printf(" (%ld bytes: %ld train, %ld validation)", static_cast<long>(session->corpus->size()),
                static_cast<long>(session->corpus->train_size()), static_cast<long>(session->corpus->val_size()));
  std::printf("\n  %ld steps x %ld micro-batch(es) of %ld x %ld, lr %g (warm-up %ld, cosine to %g)\n",
              static_cast<long>(c.steps), static_cast<long>(c.grad_accum), static_cast<long>(c.batch_size),
              static_cast<long>(c.model == "gpt" ? c.seq_len : 1), c.lr, static_cast<long>(c.warmup), c.min_lr);
  if (!c.resume.empty())
    std::printf("  resumed from %s at step %ld\n", c.resume.c_str(), static_cast<long>(session->trainer->step()));
  std::fflush(stdout);

  train::RunOptions ro;
  ro.steps = c.stop_after > 0 ? std::min(c.steps, session->trainer->step() + c.stop_after) : c.steps;
  ro.eval_every = c.eval_every;
  ro.save_every = c.save_every;
  ro.save_dir = c.save;
  ro.metrics_path = group.rank() == 0 ? c.metrics : "";
  ro.append_metrics = !c.resume.empty();
  ro.log_every = c.log_every;
  ro.terminal = ::isatty(::fileno(stdout)) != 0;
  ro.run_info_json = nlohmann::json{{"config", nlohmann::json::parse(train::config_to_json(c))},
                                    {"recipe", nlohmann::json::parse(amp::recipe_to_json(session->recipe))},
                                    {"model", nlohmann::json::parse(model.config_json())},
                                    {"parameters", model.parameter_count()},
                                    {"resumed_at", session->trainer->step()}}
                         .dump();
  const train::RunSummary s = train::run(*session->trainer, ro);
  std::printf("done: %ld steps in %.1f s, %.0f tokens/s (%.1f ms/step), %ld skipped, final loss scale %g\n",
              static_cast<long>(s.steps_done), s.seconds, s.tokens_per_s, s.mean_step_seconds * 1e3,
              static_cast<long>(s.skipped_steps), s.final_loss_scale);
  if (s.diverged) std::printf("DIVERGED at step %ld\n", static_cast<long>(s.diverged_at));
  if (s.evaluated)
    std::printf("final: train loss %.4f  val_loss %.4f  val_bpc %.4f\n", s.final_loss, s.final_eval.val_loss,
                s.final_eval.val_bpc);
}

Registrar reg(30, [](CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a GPT (byte-level text) or an MLP (Fashion-MNIST) under a recipe");
  auto cfg = std::make_shared<train::TrainConfig>();
  for (auto& k : train::config_keys(*cfg)) {
    const std::string flag = "--" + k.key;
    std::visit(
        [&](auto* target) {
          using T = std::remove_pointer_t<decltype(target)>;
          if constexpr (std::is_same_v<T, bool>) cmd->add_flag(flag, *target, k.help);
          else if constexpr (std::is_same_v<T, std::vector<std::string>>) cmd->add_option(flag, *target, k.help);
          else if (k.key == "checkpoint-activations")  // a bare flag means every block
            cmd->add_option(flag, *target, k.help)->expected(0, 1)->default_str("1")
                ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
          else cmd->add_option(flag, *target, k.help)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        },
        k.target);
  }
  cmd->add_option("--config", cfg->config, "JSON file with the same keys as the flags (flags win)");
  cmd->callback([cmd, cfg] { train_command(cmd, *cfg); });
});

}  // namespace
}  // namespace mantissa::cli
