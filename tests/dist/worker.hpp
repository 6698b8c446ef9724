// Helpers of the tests that run themselves under `mpirun -np 2`: a launch
// test starts the same binary with MANTISSA_DIST_WORKER set and a filter
// naming the worker tests, which then run as the ranks of one job.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "mantissa/dist/group.hpp"
#include "mantissa/nn/module.hpp"

namespace dist_test {

inline bool is_worker() { return std::getenv("MANTISSA_DIST_WORKER") != nullptr; }

inline bool have_mpirun() {
  return mantissa::dist::Group::mpi_built() && std::system("command -v mpirun >/dev/null 2>&1") == 0;
}

// Runs this test binary as 2 ranks with the tests matching `filter`; the exit status.
inline int launch_workers(const std::string& filter) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = "MANTISSA_DIST_WORKER=1 OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 bash '" MANTISSA_SOURCE_DIR
                          "/scripts/mpirun-local.sh' -np 2 '" + self + "' --gtest_filter='" + filter +
                          "' --gtest_brief=1 2>&1";
  return std::system(cmd.c_str());
}

// About 40 kB of words: enough windows for tiny GPTs and their validation.
inline std::string corpus_text() {
  std::string s;
  std::mt19937_64 rng(9);
  const char* words[] = {"the ", "sense ", "and ", "sensibility ", "of ", "Elinor ", "Marianne, ", "said. "};
  while (s.size() < 40000) s += words[rng() % 8];
  return s;
}

// FNV-1a over every weight's bits.
inline uint64_t weights_hash(mantissa::nn::Model& m) {
  uint64_t h = 1469598103934665603ull;
  for (mantissa::autograd::Parameter* p : m.parameters()) {
    const auto* b = p->value.data<uint8_t>();
    for (size_t i = 0; i < p->value.bytes(); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

// Every rank's v, gathered on every rank.
template <class T>
std::vector<T> gathered(mantissa::dist::Group& g, T v) {
  std::vector<T> all(static_cast<size_t>(g.size()));
  g.allgather(&v, all.data(), sizeof v, "test all-gather");
  return all;
}

}  // namespace dist_test
