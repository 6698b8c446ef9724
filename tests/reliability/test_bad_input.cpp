// Every bad input of the reliability review, through the `mantissa` program:
// the exit code (2: bad input, 1: a run that failed) and a message naming
// the problem, never a crash, a made-up result or a silent clamp.
#include <string>
#include <vector>

#include "reliability/cli_util.hpp"

namespace {

using reliability::run;

struct Case {
  std::string args;  // after `mantissa`; @ is replaced by the scratch directory
  int code;
  std::string message;  // must appear in the output
};

class BadInput : public reliability::Scratch {
 protected:
  void expect(const Case& c) {
    std::string args = c.args;
    for (size_t at; (at = args.find('@')) != std::string::npos;) args.replace(at, 1, dir_.string());
    const reliability::Result r = run(args);
    EXPECT_EQ(r.signal, 0) << args << "\n" << r.out;
    EXPECT_EQ(r.code, c.code) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << args << "\nwanted: " << c.message << "\n" << r.out;
    EXPECT_LT(r.out.size(), 2000u) << args << ": the message echoes too much input";
  }
};

TEST_F(BadInput, TrainFlagsOutOfRangeAreRefusedBeforeAnyWork) {
  const std::string t = tiny() + " --steps 2";
  const std::vector<Case> cases = {
      {t + " --threads 70000", 2, "--threads 70000 is too large (at most"},
      {t + " --threads 33000", 2, "--threads 33000 is too large (at most"},
      {t + " --threads 4294967298", 2, "--threads"},
      {t + " --init-scale 0", 2, "--init-scale must be a finite number > 0"},
      {t + " --init-scale -1", 2, "--init-scale must be a finite number > 0"},
      {t + " --growth-factor 0", 2, "--growth-factor must be"},
      {t + " --growth-interval 0", 2, "--growth-interval must be a positive integer"},
      {t + " --backoff-factor -0.5", 2, "--backoff-factor must be"},
      {t + " --min-scale -1", 2, "--min-scale must be"},
      {tiny() + " --steps 9223372036854775808", 2, "out of range"},
      {tiny() + " --steps 18446744073709551615", 2, "out of range"},
      {tiny() + " --steps 1099511627777", 2, "--steps 1099511627777 is too large"},
      {tiny() + " --steps 12abc", 2, "is not an integer"},
      {tiny() + " --steps 2 --seq-len 100000000", 2, "--seq-len 100000000 is too large"},
      {tiny() + " --steps 2 --batch-size 9223372036854775807", 2, "--batch-size 9223372036854775807 is too large"},
      {tiny() + " --steps 2 --layers 64 --d-model 65536 --heads 1", 2, "needs more than this machine's"},
      {t + " --data /dev/zero", 2, "is not a regular file"},
      {t + " --data @", 2, "is not a regular file (a directory)"},
      {"train --model mlp --steps 2 --threads 1 --data @/corpus.txt", 2, "is a file; the mlp model reads a Fashion-MNIST directory"},
      {t + " --save @/corpus.txt/ck", 2, "is not a directory"},
      {t + " --save @/corpus.txt", 2, "--data"},
  };
  for (const Case& c : cases) expect(c);
}

// A model's own options are refused by the kinds that would ignore them.
TEST_F(BadInput, ModelOptionsAreRefusedByKindsWithoutThem) {
  auto with = [&](const std::string& model) {
    std::string t = tiny() + " --steps 2";
    return t.replace(t.find("--model gpt"), 11, "--model " + model);
  };
  const std::vector<Case> cases = {
      {with("gpt") + " --kv-heads 1", 2, "--kv-heads applies to --model llama (got --model gpt)"},
      {with("gpt") + " --ffn-hidden 32", 2, "--ffn-hidden applies to --model llama or bert (got --model gpt)"},
      {with("gpt") + " --tie-embeddings", 2, "--tie-embeddings applies to --model llama (got --model gpt)"},
      {with("bert") + " --smooth-swiglu", 2, "--smooth-swiglu applies to --model llama (got --model bert)"},
      {with("bert") + " --dropout 0.1", 2, "dropout (hidden_dropout_prob 0.1, attention_probs_dropout_prob 0.1) is not "
                                           "implemented in mantissa's BERT; it trains with --dropout 0"},
      {with("llama") + " --dropout 0.1", 2, "--dropout applies to --model gpt or bert (got --model llama)"},
      {with("llama") + " --norm post", 2, "--norm applies to --model gpt or bert (got --model llama)"},
  };
  for (const Case& c : cases) expect(c);
}

TEST_F(BadInput, ConfigFilesAreBoundedAndQuotedShort) {
  reliability::write(dir_ / "deep.json", "{\"set\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  reliability::write(dir_ / "long.json", "{\"steps\": \"" + std::string(500000, 'x') + "\"}");
  reliability::write(dir_ / "huge.json", "{\"steps\": 18446744073709551615}");
  reliability::write(dir_ / "zero.json", "{\"init-scale\": 0}");
  reliability::write(dir_ / "positions.json", "{\"seq-len\": 100000000000}");
  const std::vector<Case> cases = {
      {tiny() + " --config @/deep.json", 2, "nested deeper than 64 levels"},
      {tiny() + " --config @/long.json", 2, "must be an integer (got \"xxxx"},
      {tiny() + " --config @/huge.json", 2, "must be an integer below 2^63"},
      {tiny() + " --config @/zero.json", 2, "--init-scale must be a finite number > 0"},
      {"train --data @/corpus.txt --steps 2 --config @/positions.json", 2, "--seq-len 100000000000 is too large"},
      {tiny() + " --config /dev/zero", 2, "is not a regular file"},
  };
  for (const Case& c : cases) expect(c);
}

TEST_F(BadInput, QuantizeSeedsAndLinesAreCheckedNotWrapped) {
  const std::string q = "quantize --format e4m3fn --round stochastic";
  const std::vector<Case> cases = {
      {q + " --seed -1 </dev/null", 2, "out of range"},
      {q + " --seed 18446744073709551616 </dev/null", 2, "out of range"},
      {q + " --random-bits 4294967297 </dev/null", 2, "out of range"},
  };
  for (const Case& c : cases) expect(c);
  reliability::write(dir_ / "long.txt", std::string(1 << 20, '7') + "x\n");
  expect({"quantize --format e4m3fn <@/long.txt", 2, "... (1048577 bytes)"});
  reliability::write(dir_ / "ok.txt", "1.5\n-inf\n");
  const reliability::Result ok = run("quantize --format e4m3fn --seed 18446744073709551615 <" + path("ok.txt"));
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_EQ(ok.out, "0x3c 0x1.8p+0\n0xff nan\n");  // e4m3fn: 1.5 exact; -inf has no code but NaN (ml_dtypes)
}

TEST_F(BadInput, ExperimentRefusesWhatNoRunCouldTrain) {
  const std::string e = "experiment --out @/report --mlp-recipes none --threads 1 --data @/corpus.txt";
  const std::vector<Case> cases = {
      {e + " --recipes fp32,no-such-recipe", 2, "--recipes: unknown recipe 'no-such-recipe'"},
      {e + " --recipes ''", 2, "--recipes: expects a comma-separated list"},
      {e + " --recipes fp32 --tokens 1", 2, "--tokens 1 is less than one step"},
      {e + " --recipes fp32 --d-model 30 --heads 4", 2, "must be a multiple of --heads"},
      {e + " --recipes fp32 --mlp-recipes bogus", 2, "--mlp-recipes: unknown recipe 'bogus'"},
      {e + " --recipes fp32,bf16-amp,fp32", 2, "--recipes names 'fp32' twice"},
      {e + " --recipes fp32 --mlp-recipes fp32,fp32", 2, "--mlp-recipes names 'fp32' twice"},
      {e + " --recipes fp32 --widths 32,64,32", 2, "--widths names 32 twice"},
      {e + " --recipes fp32 --widths 0", 2, "--widths: must be > 0 (got 0)"},
  };
  for (const Case& c : cases) expect(c);
}

}  // namespace
