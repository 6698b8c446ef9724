// Subcommand registry: each cmd_*.cpp adds its subcommand to the CLI11 app
// through a static Registrar, so commands live in their own files.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mantissa::cli {

// Exit code for bad input (unknown flag, bad value, unreadable file).
inline constexpr int kUsageError = 2;

// Thrown by commands for bad input; main prints "mantissa: <message>" and
// exits with kUsageError.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Setup = std::function<void(CLI::App& app)>;
struct Registrar {
  Registrar(int order, Setup setup);
};
std::vector<std::pair<int, Setup>>& registry();

}  // namespace mantissa::cli
