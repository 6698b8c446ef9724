// Every setting of train::TrainConfig as a flag (shared by `train` and
// `inspect`, so both accept exactly the same model, data and recipe flags).
#pragma once

#include <CLI/CLI.hpp>
#include <set>
#include <string>
#include <type_traits>

#include "cli/command.hpp"
#include "mantissa/train/config.hpp"

namespace mantissa::cli {

inline void add_train_flags(CLI::App* cmd, train::TrainConfig& cfg) {
  for (auto& k : train::config_keys(cfg)) {
    const std::string flag = "--" + k.key;
    std::visit(
        [&](auto* target) {
          using T = std::remove_pointer_t<decltype(target)>;
          if constexpr (std::is_same_v<T, bool>) cmd->add_flag(flag, *target, k.help);
          else if constexpr (std::is_same_v<T, std::vector<std::string>>) cmd->add_option(flag, *target, k.help);
          else if (k.key == "checkpoint-activations")  // a bare flag means every block
            cmd->add_option(flag, *target, k.help)->expected(0, 1)->default_str("1")
                ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
          else if constexpr (std::is_same_v<T, int64_t>)
            cmd->add_option(flag, *target, k.help)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                ->check(exact_integer<int64_t>());
          else cmd->add_option(flag, *target, k.help)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        },
        k.target);
  }
  cmd->add_option("--config", cfg.config, "JSON file with the same keys as the flags (flags win)");
}

// Applies --config FILE.json under the flags given on the command line.
inline void apply_train_config_file(CLI::App* cmd, train::TrainConfig& cfg) {
  std::set<std::string> given;
  for (auto& k : train::config_keys(cfg))
    if (cmd->count("--" + k.key) > 0) given.insert(k.key);
  for (const std::string& key : given) train::check_override(cfg, key);
  if (!cfg.config.empty()) train::apply_config_file(cfg, cfg.config, given);
}

}  // namespace mantissa::cli
