// `mantissa train --init-from DIR` on directories transformers' save_pretrained
// wrote (tests/golden/data/hf_import_*): the model kind and shape come from
// config.json, the run's --dropout replaces the config's rates (said on
// stderr), fine-tuning runs under an FP8 recipe, the saved model evaluates to
// the run's final loss, and what cannot be honoured is refused with exit 2.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "temp_dir.hpp"
#include "train/cli_util.hpp"

namespace {

using cli_test::Result;
using cli_test::run;

std::string golden(const std::string& name) {
  return std::string(MANTISSA_SOURCE_DIR) + "/tests/golden/data/hf_import_" + name;
}

// An llm.c token file of n uint16 ids below `below`.
std::string token_file(size_t n, uint32_t below, uint64_t seed) {
  std::string out;
  auto put = [&](uint32_t v, int width) {
    for (int b = 0; b < width; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
  };
  const uint32_t header[3] = {20240520, 1, static_cast<uint32_t>(n)};
  for (int i = 0; i < 256; ++i) put(i < 3 ? header[i] : 0, 4);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; ++i) put(static_cast<uint32_t>(rng() % below), 2);
  return out;
}

class CliInitFrom : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.write("tokens.bin", token_file(4096, 300, 1));
    dir_.write("wide.bin", token_file(4096, 512, 2));
  }
  std::string path(const std::string& name) const { return dir_ / name; }
  static std::string small() { return " --steps 3 --seq-len 16 --batch-size 4 --threads 1 --eval-batches 2"; }
  TempDir dir_{"cli_init_from"};
};

TEST_F(CliInitFrom, FineTunesAGpt2AndItsSaveEvaluatesToTheFinalLoss) {
  const Result r = run("train --init-from " + golden("gpt2") + " --data " + path("tokens.bin") + small() +
                       " --save " + path("tuned"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--dropout 0 replaces"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attn_pdrop 0.1"), std::string::npos) << r.out;
  const auto at = r.out.find("final: train loss");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string val = r.out.substr(r.out.find("val_loss", at), 20);
  const Result e = run("eval --checkpoint " + path("tuned") + " --data " + path("tokens.bin") + " --seq-len 16 "
                       "--batch-size 4 --max-batches 2 --threads 1");
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find(val), std::string::npos) << val << "\n" << e.out;
}

TEST_F(CliInitFrom, FineTunesABf16LlamaUnderAnFp8Recipe) {
  const Result r = run("train --init-from " + golden("llama") + " --recipe fp8-delayed --data " + path("tokens.bin") +
                       small());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("nats/token"), std::string::npos) << r.out;
}

TEST_F(CliInitFrom, WhatCannotBeHonouredIsRefused) {
  const std::string from = " --init-from " + golden("gpt2") + " --data " + path("tokens.bin") + small();
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {"train" + from + " --layers 3", "--layers does not apply with --init-from"},
      {"train" + from + " --vocab-size 512", "--vocab-size does not apply with --init-from"},
      {"train" + from + " --model llama", "disagrees with --init-from"},
      {"train" + from + " --resume " + golden("llama"), "exclude each other"},
      {"train --init-from " + golden("gpt2") + " --data " + path("wide.bin") + small(),
       "at token offset "},
      {"train --init-from " + path("nothing") + " --data " + path("tokens.bin") + small(), "nothing"},
  };
  for (const Case& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << "\n" << r.out;
  }
}

}  // namespace
