// `mantissa inspect` end to end on a tiny GPT (1 block, width 32, 16 x 64
// tokens per step, so its output gradients at init sit near E5M2's smallest
// subnormal 2^-16): fp8-noscale ranks output-gradient sites that flush most
// of their values at the top, with the logit gradient among them once the
// readout is cast; fp8-delayed keeps every site above the 10 dB floor; the
// inspected run's losses equal `mantissa train`'s bit for bit; bad input
// exits with code 2 and leaves a user's directory alone.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "train/cli_util.hpp"

namespace fs = std::filesystem;

namespace {

using cli_test::Result;
using cli_test::run;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CliInspect : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mantissa_cli_inspect_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string text = cli_test::word_corpus(20000, 5);
    std::ofstream(dir_ / "corpus.txt") << text;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string flags() const {
    return "--model gpt --data " + (dir_ / "corpus.txt").string() +
           " --layers 1 --d-model 32 --heads 2 --seq-len 64 --batch-size 16 --threads 1 --steps 4 --warmup 2";
  }
  nlohmann::json ranking(const std::string& out) const { return nlohmann::json::parse(slurp(dir_ / out / "ranking.json")); }
  fs::path dir_;
};

// Losses of `train --metrics` (step order) and of inspect's steps.csv.
std::vector<double> train_losses(const fs::path& jsonl) {
  std::ifstream in(jsonl);
  std::vector<double> v;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) v.push_back(j["loss"]);
  }
  return v;
}
std::vector<double> inspect_losses(const fs::path& steps_csv) {
  std::ifstream in(steps_csv);
  std::vector<double> v;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string field;
    for (int i = 0; i < 4; ++i) std::getline(ss, field, ',');
    v.push_back(std::stod(field));
  }
  return v;
}

TEST_F(CliInspect, NoscaleRanksFlushedGradientsFirst) {
  const Result r = run("inspect --recipe fp8-noscale " + flags() + " --out " + (dir_ / "a").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json sites = ranking("a")["sites"];
  ASSERT_GE(sites.size(), 10u);
  // The worst: qkv's output gradient, most of its values flushed; then the
  // MLP's first product's, a quarter flushed; every other site loses < 10%.
  EXPECT_EQ(sites[0]["site"], "h0.attn.qkv backward dY");
  EXPECT_GT(sites[0]["underflow"].get<double>(), 0.5);
  EXPECT_EQ(sites[1]["site"], "h0.mlp.fc backward dY");
  EXPECT_GT(sites[1]["underflow"].get<double>(), 0.2);
  for (size_t i = 2; i < sites.size(); ++i) EXPECT_LT(sites[i]["lost"].get<double>(), 0.1) << sites[i].dump();
  EXPECT_NE(r.out.find("flushed to zero, below e5m2's smallest subnormal 2^-16"), std::string::npos) << r.out;
  for (const char* f : {"sites.csv", "sites.jsonl", "params.csv", "steps.csv", "warnings.txt", "sqnr_heatmap.svg",
                        "fractions.svg", "grad_cosine.svg"})
    EXPECT_TRUE(fs::exists(dir_ / "a" / f)) << f;
  EXPECT_EQ(slurp(dir_ / "a" / "sites.csv").rfind("step,site,kind,format,values,sqnr_db,", 0), 0u);

  // The readout cast too: the logit gradient is among the worst three.
  const Result c = run("inspect --recipe fp8-noscale --set cast_readout=true " + flags() + " --out " + (dir_ / "c").string());
  ASSERT_EQ(c.code, 0) << c.out;
  const nlohmann::json cs = ranking("c")["sites"];
  bool logits = false;
  for (size_t i = 0; i < 3; ++i) logits |= cs[i]["site"] == "logits backward dY";
  EXPECT_TRUE(logits) << cs.dump(1);
}

TEST_F(CliInspect, DelayedStaysAboveTheFloorAndLossesMatchTrain) {
  const Result r = run("inspect --recipe fp8-delayed " + flags() + " --out " + (dir_ / "d").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json ranked = ranking("d");
  for (const auto& s : ranked["sites"]) {
    ASSERT_FALSE(s["min_sqnr_db"].is_null()) << s.dump();
    EXPECT_GE(s["min_sqnr_db"].get<double>(), 10.0) << s.dump();
  }
  EXPECT_EQ(slurp(dir_ / "d" / "warnings.txt").find("SQNR"), std::string::npos);

  // The probe only reads: the inspected run's losses are `train`'s, bit for bit.
  const Result t = run("train --recipe fp8-delayed " + flags() + " --eval-every 0 --metrics " + (dir_ / "m.jsonl").string());
  ASSERT_EQ(t.code, 0) << t.out;
  const std::vector<double> want = train_losses(dir_ / "m.jsonl");
  ASSERT_EQ(want.size(), 4u);
  ASSERT_EQ(inspect_losses(dir_ / "d" / "steps.csv"), want);
}

TEST_F(CliInspect, AccumulatedMicroBatchesLossesMatchTrain) {
  // --grad-accum 2: the inspected run takes the trainer's step, which sums
  // the micro-batches' gradients each computed from zero; adding the second
  // backward pass into the first's gradients instead rounds differently
  // (step 4's loss moves by ~1e-9 here), so the losses must be train's bit for bit.
  const std::string accum = flags() + " --grad-accum 2";
  const Result r = run("inspect --recipe bf16-amp " + accum + " --out " + (dir_ / "g").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const Result t = run("train --recipe bf16-amp " + accum + " --eval-every 0 --metrics " + (dir_ / "g.jsonl").string());
  ASSERT_EQ(t.code, 0) << t.out;
  const std::vector<double> want = train_losses(dir_ / "g.jsonl");
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(inspect_losses(dir_ / "g" / "steps.csv"), want);
}

TEST_F(CliInspect, SixteenBitSavesAndTileScalesLeaveLossesAlone) {
  // bf16-amp: its saves are bf16 sites; mxfp8 / nvfp4-naive / mxfp4-fwd:
  // block-scaled sites carry their tiles' scales (mxfp4-fwd's forward casts;
  // its backward ones are Hadamard-rotated and not looked at); in each the
  // losses are train's, bit for bit (FP4: stochastic rounding, separate Wgrad casts).
  for (const std::string recipe : {"bf16-amp", "mxfp8", "nvfp4-naive", "mxfp4-fwd"}) {
    // Every value (--max-values 0): a site's SQNR pools the very tiles whose worst is reported.
    const Result r =
        run("inspect --recipe " + recipe + " " + flags() + " --max-values 0 --out " + (dir_ / recipe).string());
    ASSERT_EQ(r.code, 0) << r.out;
    const Result t = run("train --recipe " + recipe + " " + flags() + " --eval-every 0 --metrics " +
                         (dir_ / (recipe + ".jsonl")).string());
    ASSERT_EQ(t.code, 0) << t.out;
    const std::vector<double> want = train_losses(dir_ / (recipe + ".jsonl"));
    ASSERT_EQ(want.size(), 4u) << recipe;
    EXPECT_EQ(inspect_losses(dir_ / recipe / "steps.csv"), want) << recipe;
    int saved16 = 0, tiled = 0;
    const nlohmann::json ranked = ranking(recipe);
    for (const auto& s : ranked["sites"]) {
      if (s["kind"] == "saved" && s["format"] == "bf16") {
        ++saved16;
        EXPECT_GT(s["sqnr_db"].get<double>(), 40.0) << s.dump();  // 8 significant bits: about 50 dB
      }
      if (s.contains("tiles")) {
        ++tiled;
        const auto& tiles = s["tiles"];
        EXPECT_LE(tiles["exp_min"].get<int>(), tiles["exp_median"].get<int>()) << s.dump();
        EXPECT_LE(tiles["exp_median"].get<int>(), tiles["exp_max"].get<int>()) << s.dump();
        if (!tiles["worst_sqnr_db"].is_null() && !s["min_sqnr_db"].is_null()) {
          EXPECT_LE(tiles["worst_sqnr_db"].get<double>(), s["min_sqnr_db"].get<double>() + 1e-9) << s.dump();
        }
      }
    }
    if (recipe == "bf16-amp") {
      EXPECT_GE(saved16, 4) << r.out;
      EXPECT_EQ(tiled, 0);
    } else {
      EXPECT_GE(tiled, 4) << recipe << "\n" << r.out;
    }
  }
  const std::string csv = slurp(dir_ / "mxfp8" / "sites.csv");
  EXPECT_NE(csv.find(",blocks,block_exp_min,block_exp_median,block_exp_max,blocks_at_floor,blocks_at_ceiling,"
                     "worst_block_sqnr_db\n"),
            std::string::npos);
}

TEST_F(CliInspect, MasterWeightsAndGradientCasts) {
  // fp16 working weights rounded from fp32 masters, fp16 gradients. For x =
  // m 2^e (m in [1, 2)) nearest rounding to 11 significant bits leaves an
  // error uniform over +-half an ulp, ulp = 2^(e-10): E[err^2] = 2^(2e-20)/12.
  // With m log-uniform in [1, 2), E[m^2] = 3 / (2 ln 2), so the SQNR is
  // 10 log10(2^20 x 12 x 3 / (2 ln 2)) = 74.3 dB for values in the normal range.
  const Result r = run("inspect --recipe fp16-master " + flags() + " --out " + (dir_ / "w").string());
  ASSERT_EQ(r.code, 0) << r.out;
  int weights = 0, grads = 0;
  const nlohmann::json ranked = ranking("w");
  for (const auto& s : ranked["sites"]) {
    const std::string kind = s["kind"];
    if (kind != "weight" && kind != "grad") continue;
    (kind == "weight" ? weights : grads)++;
    EXPECT_EQ(s["format"], "fp16");
    if (s["site"] == "transformer.h.0.attn.c_attn.weight weight") {
      EXPECT_NEAR(s["sqnr_db"].get<double>(), 74.3, 1.5);
    }
    if (kind == "grad") {
      EXPECT_EQ(s["scale_log2"], 16);  // the loss scale the gradients carry
    }
  }
  EXPECT_EQ(grads, 16);    // every parameter of the 1-block GPT
  EXPECT_GE(weights, 6);   // its matrices and biases (norm gains may stay fp32)
}

TEST_F(CliInspect, TrainWatchWarnsWithoutChangingTheRun) {
  const std::string f = flags() + " --recipe fp8-noscale --eval-every 0 --metrics ";
  const Result plain = run("train " + f + (dir_ / "plain.jsonl").string());
  const Result watched = run("train --watch 1 " + f + (dir_ / "watched.jsonl").string());
  ASSERT_EQ(plain.code, 0) << plain.out;
  ASSERT_EQ(watched.code, 0) << watched.out;
  EXPECT_NE(watched.out.find("warning: step 1: h0.attn.qkv backward dY:"), std::string::npos) << watched.out;
  EXPECT_NE(watched.out.find("watch: "), std::string::npos) << watched.out;
  EXPECT_EQ(plain.out.find("warning"), std::string::npos) << plain.out;
  const std::vector<double> a = train_losses(dir_ / "plain.jsonl");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(train_losses(dir_ / "watched.jsonl"), a);
}

TEST_F(CliInspect, BadInput) {
  fs::create_directories(dir_ / "mine");
  std::ofstream(dir_ / "mine" / "notes.txt") << "keep";
  Result r = run("inspect --recipe fp8-noscale " + flags() + " --out " + (dir_ / "mine").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("did not create"), std::string::npos) << r.out;
  EXPECT_EQ(slurp(dir_ / "mine" / "notes.txt"), "keep");
  EXPECT_EQ(fs::directory_iterator(dir_ / "mine")->path().filename(), "notes.txt");
  r = run("inspect --recipe fp8-noscale " + flags() + " --sync-every -1 --out " + (dir_ / "x").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--sync-every"), std::string::npos) << r.out;
  r = run("inspect --recipe fp8-noscale " + flags() + " --free-running --sync-every 3 --out " + (dir_ / "x").string());
  EXPECT_EQ(r.code, 2) << r.out;
  r = run("inspect --recipe no-such-recipe " + flags() + " --out " + (dir_ / "y").string());
  EXPECT_EQ(r.code, 2) << r.out;
}

// Every output flag is honoured or refused, and --out never writes through
// a link: each case exits 2 before training and leaves no file behind.
TEST_F(CliInspect, OutputsItDoesNotHonourAreRefused) {
  fs::create_directories(dir_ / "target");
  fs::create_directory_symlink(dir_ / "target", dir_ / "link");
  Result r = run("inspect --recipe fp8-noscale " + flags() + " --out " + (dir_ / "link").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("symbolic link"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_empty(dir_ / "target"));
  const std::string out = " --out " + (dir_ / "z").string();
  for (const std::string& flag : {"--save " + (dir_ / "ck").string(), "--metrics " + (dir_ / "m.jsonl").string(),
                                  std::string("--eval-every 5"), std::string("--save-every 2"),
                                  std::string("--stop-after 1")}) {
    r = run("inspect --recipe fp8-noscale " + flags() + " " + flag + out);
    EXPECT_EQ(r.code, 2) << flag << ": " << r.out;
    EXPECT_NE(r.out.find("inspect does not use " + flag.substr(0, flag.find(' '))), std::string::npos) << r.out;
  }
  for (const char* floor : {"nan", "inf"}) {
    r = run("inspect --recipe fp8-noscale " + flags() + " --sqnr-floor " + floor + out);
    EXPECT_EQ(r.code, 2) << floor << ": " << r.out;
    EXPECT_NE(r.out.find("--sqnr-floor"), std::string::npos) << r.out;
  }
  EXPECT_FALSE(fs::exists(dir_ / "z"));
  EXPECT_FALSE(fs::exists(dir_ / "ck"));
  EXPECT_FALSE(fs::exists(dir_ / "m.jsonl"));
  r = run("train --watch -1 " + flags());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--watch must be"), std::string::npos) << r.out;
}

}  // namespace
