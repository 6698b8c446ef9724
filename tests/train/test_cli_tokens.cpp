// `mantissa train / eval` on token files (nanoGPT's train.bin/val.bin, an
// llm.c file): the run reports nats and bits per token, refuses what it
// cannot train on (missing or too small --vocab-size, BERT, --vocab-size on
// byte text, an incomplete directory) with exit code 2, resumes with
// bit-identical losses, and eval of the saved model repeats the final loss.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "temp_dir.hpp"
#include "train/cli_util.hpp"

namespace fs = std::filesystem;

namespace {

using cli_test::read_jsonl;
using cli_test::Result;
using cli_test::run;

void put(std::string& out, uint32_t v, int width) {
  for (int b = 0; b < width; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
}

// Ids below 512 from a seeded walk (each id near the previous one), so the
// data has structure a model can learn.
std::vector<uint32_t> walk(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> v(n);
  uint32_t x = 0;
  for (auto& id : v) id = x = (x + static_cast<uint32_t>(rng() % 7)) % 512;
  return v;
}

class CliTokens : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string train, val;
    for (uint32_t id : walk(6000, 1)) put(train, id, 2);
    for (uint32_t id : walk(700, 2)) put(val, id, 2);
    dir_.write("nano/train.bin", train);
    dir_.write("nano/val.bin", val);
    dir_.write("corpus.txt", cli_test::word_corpus(6000, 3));
  }
  std::string path(const std::string& name) const { return dir_ / name; }
  void write(const std::string& name, const std::string& bytes) const { dir_.write(name, bytes); }
  static std::string tiny(const std::string& model = "gpt") {
    return " --model " + model +
           " --layers 1 --d-model 16 --heads 2 --seq-len 16 --batch-size 2 --threads 1 "
           "--warmup 2 --lr 1e-2 --eval-batches 4";
  }
  TempDir dir_{"cli_tokens"};
};

TEST_F(CliTokens, TrainsOnANanoGptDirectoryInNatsPerToken) {
  const Result r = run("train --data " + path("nano") + " --vocab-size 512 --steps 3" + tiny() +
                       " --metrics " + path("m.jsonl"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(
      r.out.find(
          "nanoGPT uint16: 6000 training tokens (train.bin), 700 validation tokens (val.bin)"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("final: train loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" nats/token  val_bits_per_token "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("val_bpc"), std::string::npos) << r.out;
  const auto lines = read_jsonl(path("m.jsonl"));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front()["run"]["data"]["unit"], "token");
  EXPECT_EQ(lines.front()["run"]["model"]["vocab_size"], 512);
  const nlohmann::json& e = lines.back();
  ASSERT_TRUE(e.contains("val_bits_per_token")) << e.dump();
  EXPECT_FALSE(e.contains("val_bpc"));
  const double nats = e["val_nats_per_token"].get<double>();
  EXPECT_EQ(nats, e["val_loss"].get<double>());
  EXPECT_NEAR(e["val_bits_per_token"].get<double>(), nats / std::log(2.0), 1e-12);
  // An untrained model over 512 ids starts near ln 512 nats a token.
  EXPECT_GT(nats, 4.0);
  EXPECT_LT(nats, 8.0);
}

TEST_F(CliTokens, LlamaReadsTheVocabularyAndAnLlmcFile) {
  std::string file;
  const uint32_t header[3] = {20240801, 7, 3000};
  for (int i = 0; i < 256; ++i) put(file, i < 3 ? header[i] : 0, 4);
  for (uint32_t id : walk(3000, 4)) put(file, id + 1000, 4);  // ids up to 1511
  write("one.bin", file);
  const Result r = run("train --data " + path("one.bin") + " --vocab-size 1600 --steps 2" +
                       tiny("llama") + " --metrics " + path("l.jsonl"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("llm.c uint32: 2700 training tokens, 300 validation tokens"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(read_jsonl(path("l.jsonl")).front()["run"]["model"]["vocab_size"], 1600);
}

TEST_F(CliTokens, RefusesWhatItCannotTrainOn) {
  const std::string data = " --steps 1 --data " + path("nano");
  auto refused = [&](const std::string& args, const std::string& says) {
    const Result r = run("train" + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << "\n" << r.out;
  };
  refused(data + tiny(), "give the model's vocabulary with --vocab-size N (at least ");
  refused(data + tiny() + " --vocab-size 256", "at token offset ");
  refused(data + tiny("bert") + " --vocab-size 512",
          "--vocab-size applies to --model gpt or llama");
  refused(data + tiny("bert"), "a masked LM built here is byte-level");
  refused(" --steps 1 --data " + path("corpus.txt") + tiny() + " --vocab-size 512",
          "byte-level text");
  // The analysis reads byte text only: it refuses token data rather than
  // read its bytes as characters. The study takes token data, with the
  // vocabulary of the model it trains.
  for (const auto& [cmd, says] :
       {std::pair<std::string, std::string>{"analyse --model gpt --out " + path("an") + " --data " + path("nano"),
                                            "token data is not supported here yet"},
        {"experiment --recipes fp32 --mlp-recipes none --out " + path("study") + " --data " + path("nano"),
         "is token data: give the model's vocabulary with --vocab-size N"}}) {
    const Result r = run(cmd);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << cmd << "\n" << r.out;
  }
  EXPECT_FALSE(fs::exists(path("study")));
  EXPECT_FALSE(fs::exists(path("an")));
  fs::remove(path("nano/val.bin"));
  refused(data + tiny() + " --vocab-size 512", "train.bin but no val.bin");
}

TEST_F(CliTokens, ResumesBitIdenticallyAndEvalRepeatsTheFinalLoss) {
  const std::string common =
      "train --data " + path("nano") + " --vocab-size 512" + tiny() + " --eval-every 0";
  ASSERT_EQ(run(common + " --steps 6 --metrics " + path("straight.jsonl")).code, 0);
  ASSERT_EQ(run(common + " --steps 6 --stop-after 3 --save " + path("ck") + " --metrics " +
                path("resumed.jsonl"))
                .code,
            0);
  const Result r = run(common + " --steps 6 --resume " + path("ck") + " --save " + path("ck") +
                       " --metrics " + path("resumed.jsonl"));
  ASSERT_EQ(r.code, 0) << r.out;
  auto records = [&](const std::string& file) {
    std::vector<double> losses, evals;
    for (const auto& j : read_jsonl(file)) {
      if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
      if (j.contains("val_loss") && j["step"] == 6) evals.push_back(j["val_loss"].get<double>());
    }
    return std::make_pair(losses, evals);
  };
  const auto a = records(path("straight.jsonl")), b = records(path("resumed.jsonl"));
  ASSERT_EQ(a.first.size(), 6u);
  EXPECT_EQ(a.first, b.first);  // every step's loss, bit for bit
  ASSERT_EQ(a.second.size(), 1u);
  EXPECT_EQ(a.second, b.second);  // and the final validation loss

  const Result e = run("eval --checkpoint " + path("ck") + " --data " + path("nano") +
                       " --batch-size 2 --max-batches 4 --threads 1");
  ASSERT_EQ(e.code, 0) << e.out;
  char want[64];
  std::snprintf(want, sizeof want, "val_loss %.4f nats/token", a.second[0]);
  EXPECT_NE(e.out.find(want), std::string::npos) << want << "\n" << e.out;
  EXPECT_NE(e.out.find("val_bits_per_token"), std::string::npos) << e.out;
  // A model of 512 ids is not evaluated on the 256 bytes of a text file.
  const Result bytes = run("eval --checkpoint " + path("ck") + " --data " + path("corpus.txt"));
  EXPECT_EQ(bytes.code, 2) << bytes.out;
  EXPECT_NE(bytes.out.find("vocabulary 512"), std::string::npos) << bytes.out;
}

}  // namespace
