// Running the `mantissa` program from tests: exit code and output, a scratch
// directory with a small corpus, and checkpoint files rewritten with a
// manifest that still matches (so a test reaches the check behind the CRC).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "mantissa/io/files.hpp"
#include "train/cli_util.hpp"

namespace reliability {

namespace fs = std::filesystem;

using cli_test::Result;
using cli_test::run;
inline Result run_shell(const std::string& cmd) { return cli_test::run_command(cmd); }

inline std::string read(const fs::path& p) { return mantissa::io::read_file(p.string()); }
inline void write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// Replaces one file of checkpoint dir and updates COMPLETE's size and CRC-32
// for it, so only the content check can refuse it.
inline void replace_in_checkpoint(const fs::path& dir, const std::string& name, const std::string& bytes) {
  write(dir / name, bytes);
  auto manifest = nlohmann::json::parse(read(dir / "COMPLETE"));
  manifest["files"][name] = {{"bytes", bytes.size()}, {"crc32", mantissa::io::crc32(bytes.data(), bytes.size())}};
  write(dir / "COMPLETE", manifest.dump(2));
}

// step -> every loss logged for it (a step re-run after a kill is logged twice).
inline std::multimap<int, double> losses(const std::string& metrics) {
  std::multimap<int, double> out;
  std::istringstream in(read(metrics));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss") && j["loss"].is_number()) out.emplace(j["step"].get<int>(), j["loss"].get<double>());
  }
  return out;
}

class Scratch : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("mantissa_rel_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string text = cli_test::word_corpus(6000, 3);
    write(dir_ / "corpus.txt", text);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // A tiny GPT run (1 block, d_model 16): a step takes milliseconds.
  std::string tiny(const std::string& recipe = "fp32") const {
    return "train --model gpt --data " + path("corpus.txt") + " --recipe " + recipe +
           " --layers 1 --d-model 16 --heads 2 --seq-len 16 --batch-size 2 --threads 1 --warmup 2 --lr 1e-2"
           " --eval-batches 2 --eval-every 0";
  }
  fs::path dir_;
};

}  // namespace reliability
