// `mantissa train --init-from DIR` and `eval` on a default BertForMaskedLM
// that transformers saved with its WordPiece tokenizer
// (tests/golden/data/hf_import_bert): text tokenized by `mantissa tokenize`
// becomes masked-LM rows with the tokenizer's [CLS], [SEP], [MASK] and [PAD]
// ids; fine-tuning under fp32, bf16-amp and fp8-delayed gives a finite
// training loss that falls; the saved model evaluates, in nats per token, to
// the run's final validation loss (the same figure after an fp32 run); what
// the rows cannot be built from is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "mantissa/io/files.hpp"
#include "temp_dir.hpp"
#include "train/cli_util.hpp"

namespace {

using cli_test::read_jsonl;
using cli_test::Result;
using cli_test::run;

std::string golden() { return std::string(MANTISSA_SOURCE_DIR) + "/tests/golden/data/hf_import_bert"; }

class CliInitFromBert : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.write("text.txt", cli_test::word_corpus(60000, 5));
    const Result t = run("tokenize -q --tokenizer " + golden() + "/tokenizer.json " + path("text.txt") + " " +
                         path("tokens.bin"));
    ASSERT_EQ(t.code, 0) << t.out;
  }
  std::string path(const std::string& name) const { return dir_ / name; }
  static std::string small() { return " --seq-len 32 --batch-size 8 --threads 1 --eval-batches 2 --lr 2e-3"; }
  TempDir dir_{"cli_init_from_bert"};
};

// Mean training loss of the first and the last `k` logged steps.
std::pair<double, double> first_and_last(const std::string& metrics, size_t k) {
  std::vector<double> loss;
  for (const auto& j : read_jsonl(metrics))
    if (j.contains("loss") && j["loss"].is_number()) loss.push_back(j["loss"].get<double>());
  if (loss.size() < 2 * k) return {NAN, NAN};
  double a = 0, b = 0;
  for (size_t i = 0; i < k; ++i) a += loss[i], b += loss[loss.size() - 1 - i];
  return {a / static_cast<double>(k), b / static_cast<double>(k)};
}

// The number after "val_loss " from `from` on in out (NaN if none).
double val_loss_in(const std::string& out, size_t from = 0) {
  const auto at = out.find("val_loss ", from);
  return at == std::string::npos ? NAN : std::stod(out.substr(at + 9));
}

TEST_F(CliInitFromBert, FineTunesUnderBf16AndFp8AndTheSaveEvaluatesToTheFinalLoss) {
  for (const char* recipe : {"fp32", "bf16-amp", "fp8-delayed"}) {
    const std::string tag = recipe;
    const Result r = run("train --init-from " + golden() + " --recipe " + tag + " --data " + path("tokens.bin") +
                         " --steps 40 --log-every 1" + small() + " --metrics " + path(tag + ".jsonl") + " --save " +
                         path(tag));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("--dropout 0 replaces"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("nats/token"), std::string::npos) << r.out;
    const auto [first, last] = first_and_last(path(tag + ".jsonl"), 5);
    ASSERT_TRUE(std::isfinite(first) && std::isfinite(last)) << tag << "\n" << r.out;
    EXPECT_LT(last, first - 0.5) << tag << ": the masked-LM loss did not fall";
    const auto at = r.out.find("final: train loss");
    ASSERT_NE(at, std::string::npos) << r.out;
    const Result e = run("eval --checkpoint " + path(tag) + " --data " + path("tokens.bin") +
                         " --seq-len 32 --batch-size 8 --max-batches 2 --threads 1");
    ASSERT_EQ(e.code, 0) << e.out;
    EXPECT_NE(e.out.find("nats/token"), std::string::npos) << e.out;
    // eval computes in fp32: the run's own figure under fp32, within the products' rounding otherwise.
    const double run_loss = val_loss_in(r.out, at), eval_loss = val_loss_in(e.out);
    if (tag == "fp32")
      EXPECT_EQ(run_loss, eval_loss) << r.out << "\n" << e.out;
    else
      EXPECT_NEAR(run_loss, eval_loss, 0.05) << tag << "\n" << e.out;
  }
}

TEST_F(CliInitFromBert, RowsThatCannotBeBuiltAreRefused) {
  // Without its tokenizer files the directory names no [CLS], [SEP] or [MASK] id.
  dir_.write("bare/config.json", mantissa::io::read_file(golden() + "/config.json"));
  dir_.write("bare/model.safetensors", mantissa::io::read_file(golden() + "/model.safetensors"));
  Result r = run("train --init-from " + path("bare") + " --data " + path("tokens.bin") + " --steps 1" + small());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("[CLS], [SEP], [MASK]"), std::string::npos) << r.out;
  // A BERT built here is byte-level: its ids 256.. are its special tokens.
  r = run("train --model bert --data " + path("tokens.bin") + " --steps 1" + small());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("byte-level"), std::string::npos) << r.out;
  // The tokenizer's vocabulary on byte-level text.
  r = run("train --init-from " + golden() + " --data " + path("text.txt") + " --steps 1" + small());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("token data"), std::string::npos) << r.out;
}

}  // namespace
