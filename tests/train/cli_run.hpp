// Runs the mantissa program with arguments, for the CLI tests: exit code
// and everything it printed (stdout and stderr).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace cli_test {

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr
};

inline Result run(const std::string& args) {
  const std::string cmd = std::string(MANTISSA_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  Result r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace cli_test
