// Shared by the CLI tests: run a shell command (or the mantissa program)
// capturing its output and exit code; a reproducible word-salad corpus; a
// metrics file's records.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace cli_test {

struct Result {
  int code = -1;    // exit code; -1 if killed by a signal
  int signal = 0;   // the signal, if killed
  std::string out;  // stdout and stderr
};

// `cmd` through /bin/sh with stderr joined to stdout.
inline Result run_command(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  Result r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  if (WIFEXITED(status)) r.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

// The mantissa program with `args`.
inline Result run(const std::string& args) { return run_command(std::string(MANTISSA_CLI) + " " + args); }

// The JSON objects of a JSON-lines file (a metrics file), in order.
inline std::vector<nlohmann::json> read_jsonl(const std::string& file) {
  std::ifstream in(file);
  std::vector<nlohmann::json> v;
  for (std::string line; std::getline(in, line);) v.push_back(nlohmann::json::parse(line));
  return v;
}

// At least `bytes` of English-looking words drawn with a fixed seed.
inline std::string word_corpus(size_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const char* words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "lazy ", "dog", ".\n", ", "};
  std::string text;
  while (text.size() < bytes) text += words[rng() % std::size(words)];
  return text;
}

}  // namespace cli_test
