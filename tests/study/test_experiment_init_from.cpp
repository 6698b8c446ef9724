// `mantissa experiment --init-from DIR --data TOKENS`: every recipe fine-tunes
// the same transformers-written GPT-2 (tests/golden/data/hf_import_gpt2, whose
// loss equals transformers' in nn_test_hf_import) on the same token batches,
// and the report gives the text task in nats per token. Checked against the
// checkpoint itself: each run's first training loss is the loaded model's
// loss on the first batch its seed draws (a run that ignored --init-from would
// start from a random model), and the divergence threshold is ln V of the
// checkpoint's vocabulary. Also: a study trained from scratch on token data,
// and the flags a fine-tuning or token study refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "mantissa/data/text.hpp"
#include "mantissa/data/tokens.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/train/checkpoint.hpp"
#include "temp_dir.hpp"
#include "train/cli_util.hpp"

namespace fs = std::filesystem;
namespace data = mantissa::data;

namespace {

using cli_test::run;

const std::string kGpt2 = std::string(MANTISSA_SOURCE_DIR) + "/tests/golden/data/hf_import_gpt2";
constexpr int kVocab = 300;  // the golden's vocab_size

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// llm.c uint16 token files: a noisy repeating pattern, so that a model learns it.
void write_tokens(const TempDir& dir) {
  std::mt19937_64 rng(3);
  auto file = [&](const std::string& name, int n) {
    std::string bytes(1024, '\0');
    const int32_t header[3] = {data::kLlmcMagic16, 1, n};
    std::memcpy(bytes.data(), header, sizeof header);
    for (int i = 0; i < n; ++i) {
      const uint16_t id = static_cast<uint16_t>(rng() % 10 == 0 ? rng() % kVocab : i % 100);
      bytes.append(reinterpret_cast<const char*>(&id), 2);
    }
    dir.write(name, bytes);
  };
  file("train.bin", 8000);
  file("val.bin", 1200);
}

const std::string kShape = " --seq-len 16 --batch-size 4 --tokens 1280 --seeds 1 --threads 1 --mlp-recipes none";

TEST(ExperimentInitFrom, EveryRecipeFineTunesTheCheckpointInNatsPerToken) {
  TempDir d("study_init_from");
  write_tokens(d);
  const std::string out = d / "report";
  const auto r = run("experiment --init-from " + kGpt2 + " --data " + d.path.string() + " --recipes fp32,bf16-amp" +
                     kShape + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string md = slurp(out + "/report.md");
  EXPECT_NE(md.find("## Language model on token data: recipe by recipe"), std::string::npos) << md;
  EXPECT_NE(md.find("| recipe | val nats per token (mean ± std) | gap to fp32 |"), std::string::npos) << md;
  EXPECT_EQ(md.find("val bpc"), std::string::npos) << "a token study reported in bits per character";

  // The checkpoint's model, and the first batch seed 1337 draws from the token data.
  const std::string cfg = mantissa::train::read_model_config(kGpt2);
  std::unique_ptr<mantissa::nn::Model> model =
      mantissa::nn::find_model_kind(mantissa::nn::detect_model_kind(cfg))->load(cfg);
  mantissa::train::load_model_weights(kGpt2, *model);
  auto corpus = std::make_shared<const data::TokenCorpus>(data::TokenCorpus::load(d.path.string()));
  data::TextWindows windows(corpus, kVocab, 4, 16, 1337);
  const mantissa::nn::LossSum first = model->evaluate(windows.next());
  const double want = first.sum / static_cast<double>(first.count);

  std::vector<double> metrics;
  for (const char* recipe : {"fp32", "bf16-amp"}) {
    const fs::path run_dir = fs::path(out) / "runs" / (std::string("lm-tokens-") + recipe + "-s1337");
    const nlohmann::json res = nlohmann::json::parse(slurp(run_dir / "result.json"));
    EXPECT_EQ(res["task"], "lm-tokens");
    EXPECT_EQ(res["status"], "ok") << res.dump();
    EXPECT_DOUBLE_EQ(res["divergence_threshold"].get<double>(), std::log(static_cast<double>(kVocab)));
    // the table's metric is the final validation loss, in nats
    EXPECT_DOUBLE_EQ(res["val_bpc"].get<double>(), res["val_loss"].get<double>());
    metrics.push_back(res["val_loss"].get<double>());
    const auto lines = cli_test::read_jsonl((run_dir / "metrics.jsonl").string());
    ASSERT_GE(lines.size(), 2u);
    EXPECT_EQ(lines[0]["run"]["config"]["init-from"], kGpt2);
    const double step1 = lines[1]["loss"].get<double>();
    // fp32 computes the loaded model's loss; bf16-amp its bf16 rounding of it
    EXPECT_NEAR(step1, want, std::string(recipe) == "fp32" ? 1e-5 * want : 2e-2 * want) << recipe;
    EXPECT_LT(metrics.back(), want) << recipe << " did not learn";
  }
  // the gap in the table is the runs' own
  const double gap = 100.0 * (metrics[1] - metrics[0]) / metrics[0];
  char cell[32];
  std::snprintf(cell, sizeof cell, "%+.2f %%", gap);
  EXPECT_NE(md.find(std::string("| bf16-amp | ")), std::string::npos);
  EXPECT_NE(md.find(cell), std::string::npos) << cell << "\n" << md;
}

TEST(ExperimentInitFrom, ATokenStudyFromScratchNeedsTheVocabulary) {
  TempDir d("study_tokens");
  write_tokens(d);
  const std::string small = " --layers 1 --d-model 32 --heads 2 --recipes fp32" + kShape;
  auto r = run("experiment --data " + d.path.string() + small + " --out " + (d / "a"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("is token data: give the model's vocabulary with --vocab-size N"), std::string::npos) << r.out;
  r = run("experiment --data " + d.path.string() + " --vocab-size 300" + small + " --out " + (d / "b"));
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json res = nlohmann::json::parse(slurp(d / "b/runs/lm-tokens-fp32-s1337/result.json"));
  EXPECT_EQ(res["status"], "ok");
  EXPECT_DOUBLE_EQ(res["divergence_threshold"].get<double>(), std::log(300.0));
  EXPECT_LT(res["val_loss"].get<double>(), std::log(300.0));
}

TEST(ExperimentInitFrom, FlagsThatWouldBeIgnoredAreRefused) {
  TempDir d("study_refusals");
  write_tokens(d);
  const std::string base = "experiment --init-from " + kGpt2 + " --data " + d.path.string() + " --out " + (d / "r");
  for (const auto& [flag, says] :
       {std::pair<std::string, std::string>{" --layers 3", "--layers does not apply with --init-from"},
        {" --d-model 64", "--d-model does not apply with --init-from"},
        {" --vocab-size 300", "--vocab-size does not apply with --init-from"},
        {" --preset transfer", "--widths (of --preset transfer) does not apply with --init-from"},
        {" --model llama", "--model llama disagrees with --init-from"}}) {
    const auto r = run(base + flag);
    EXPECT_EQ(r.code, 2) << flag << ": " << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << flag << ": " << r.out;
  }
  const auto r = run("experiment --vocab-size 300 --out " + (d / "s"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--vocab-size applies to token data"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d / "r")) << "a refused study wrote its output directory";
}

}  // namespace
