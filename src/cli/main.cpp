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
#include "mantissa/io/untrusted.hpp"

namespace mantissa::cli {
std::vector<std::pair<int, Setup>>& registry() {
  static std::vector<std::pair<int, Setup>> r;
  return r;
}
Registrar::Registrar(int order, Setup setup) { registry().emplace_back(order, std::move(setup)); }

}  // namespace mantissa::cli

int main(int argc, char** argv) {
  using namespace mantissa::cli;
  CLI::App app{"mantissa: low-precision neural-network training, recipe by recipe"};
  app.require_subcommand(1);
  auto& r = registry();
  std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [order, setup] : r) setup(app);
  try {
    // Names, paths and settings end up in JSON records, which hold UTF-8 only.
    for (int i = 1; i < argc; ++i) mantissa::io::require_utf8(argv[i], "command-line argument " + std::to_string(i));
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
