// mantissa: the command-line program. Subcommands register themselves
// (command.hpp); main parses, runs, and turns errors into exit codes.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>
#include <cstdio>
#include <exception>

#include "cli/command.hpp"

namespace mantissa::cli {
std::vector<std::pair<int, Setup>>& registry() {
  static std::vector<std::pair<int, Setup>> r;
  return r;
}
Registrar::Registrar(int order, Setup setup) { registry().emplace_back(order, std::move(setup)); }

void check_writable_target(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(path, ec).lexically_normal();
  if (fs::exists(p, ec) && !fs::is_directory(p, ec))
    throw UsageError(flag + " " + path + ": exists and is not a directory");
  // Saves write a sibling directory and rename it: the parent must be writable.
  p = p.parent_path();
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  if (!fs::is_directory(p, ec)) throw UsageError(flag + " " + path + ": " + p.string() + " is not a directory");
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    throw UsageError(flag + " " + path + ": directory " + p.string() + " is not writable (" + std::strerror(errno) + ")");
}
}  // namespace mantissa::cli

int main(int argc, char** argv) {
  using namespace mantissa::cli;
  CLI::App app{"mantissa: low-precision neural-network training, recipe by recipe"};
  app.require_subcommand(1);
  auto& r = registry();
  std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [order, setup] : r) setup(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kUsageError;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "mantissa: %s\n", e.what());
    return kUsageError;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "mantissa: %s\n", e.what());
    return kUsageError;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mantissa: error: out of memory (the model, batch or data is too large for this machine)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mantissa: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
