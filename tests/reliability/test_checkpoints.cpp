// Checkpoints are never lost or poisoned: a diverged run, NaN weights or
// optimizer state, a corrupt file, a wrong step or deeply nested JSON in a
// checkpoint, each through `mantissa train --resume` and `mantissa eval`.
#include <cmath>
#include <cstring>
#include <string>

#include "reliability/cli_util.hpp"

namespace {

using reliability::read;
using reliability::run;
namespace fs = std::filesystem;

// The bytes of a safetensors file with its first data value (an f32)
// replaced by `value`.
std::string with_first_value(std::string bytes, float value) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  std::memcpy(bytes.data() + 8 + n, &value, 4);
  return bytes;
}

nlohmann::json safetensors_header(const std::string& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return nlohmann::json::parse(bytes.substr(8, n));
}

// The bytes of a safetensors file with element 0 of f32 tensor `name`
// replaced by `value`.
std::string with_tensor_value(std::string bytes, const std::string& name, float value) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const auto begin = safetensors_header(bytes).at(name).at("data_offsets").at(0).get<size_t>();
  std::memcpy(bytes.data() + 8 + n + begin, &value, 4);
  return bytes;
}

class Checkpoints : public reliability::Scratch {
 protected:
  void SetUp() override {
    Scratch::SetUp();
    const auto r = run(tiny() + " --steps 3 --save " + path("ck"));
    ASSERT_EQ(r.code, 0) << r.out;
  }
  std::string eval_line(const std::string& dir) {
    const auto r = run("eval --checkpoint " + dir + " --data " + path("corpus.txt") + " --seq-len 16 --batch-size 2");
    EXPECT_EQ(r.code, 0) << r.out;
    return r.out.substr(r.out.find("val_loss"));
  }
};

TEST_F(Checkpoints, DivergedRunExitsNonZeroAndKeepsTheGoodCheckpoint) {
  const std::string before = read(dir_ / "ck" / "model.safetensors");
  const std::string val = eval_line(path("ck"));
  // AdamW at learning rate 1e30 sends every weight to infinity at once.
  const auto r = run(tiny() + " --steps 30 --lr 1e30 --grad-clip 0 --resume " + path("ck") + " --save " + path("ck"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("training diverged at step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("was not overwritten"), std::string::npos) << r.out;
  EXPECT_EQ(read(dir_ / "ck" / "model.safetensors"), before);
  EXPECT_EQ(eval_line(path("ck")), val);
}

TEST_F(Checkpoints, NonFiniteWeightsOrStateAreRefusedOnLoad) {
  const fs::path ck = dir_ / "ck";
  for (const char* file : {"optimizer.safetensors", "model.safetensors"})
    for (float bad : {std::nanf(""), INFINITY}) {
      fs::remove_all(dir_ / "bad");
      fs::copy(ck, dir_ / "bad");
      reliability::replace_in_checkpoint(dir_ / "bad", file, with_first_value(read(ck / file), bad));
      const auto r = run(tiny() + " --steps 5 --resume " + path("bad") + " --save " + path("bad"));
      EXPECT_EQ(r.code, 2) << file << "\n" << r.out;
      EXPECT_NE(r.out.find("holds non-finite values"), std::string::npos) << r.out;
      if (std::string(file) == "model.safetensors") {
        const auto e = run("eval --checkpoint " + path("bad") + " --data " + path("corpus.txt"));
        EXPECT_EQ(e.code, 2) << e.out;
        EXPECT_NE(e.out.find("holds non-finite values"), std::string::npos) << e.out;
      }
    }
}

TEST_F(Checkpoints, EvalVerifiesTheManifestLikeResume) {
  fs::copy(dir_ / "ck", dir_ / "flipped");
  std::string bytes = read(dir_ / "flipped" / "model.safetensors");
  bytes[bytes.size() - 3] ^= 0x10;  // one weight bit
  reliability::write(dir_ / "flipped" / "model.safetensors", bytes);
  const auto r = run("eval --checkpoint " + path("flipped") + " --data " + path("corpus.txt"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("CRC-32 does not match"), std::string::npos) << r.out;
}

TEST_F(Checkpoints, EvalBatchArithmeticCannotOverflow) {
  const std::string e = "eval --checkpoint " + path("ck") + " --data " + path("corpus.txt") + " --seq-len 16";
  auto r = run(e + " --batch-size 9223372036854775807");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--batch-size 9223372036854775807 is too large"), std::string::npos) << r.out;
  r = run(e + " --batch-size 4611686018427387904 --max-batches 4");
  EXPECT_EQ(r.code, 2) << r.out;
  // An overflowing --max-batches means the whole split: the same numbers.
  const auto all = run(e + " --batch-size 2");
  const auto huge = run(e + " --batch-size 2 --max-batches 9223372036854775807");
  ASSERT_EQ(all.code, 0) << all.out;
  ASSERT_EQ(huge.code, 0) << huge.out;
  EXPECT_EQ(huge.out, all.out);
  r = run(e + " --batch-size 2 --max-batches 18446744073709551616");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("out of range"), std::string::npos) << r.out;
}

TEST_F(Checkpoints, ResumeBelowTheCheckpointStepIsAnError) {
  const auto r = run(tiny() + " --steps 2 --resume " + path("ck"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--steps 2 is below the checkpoint's step 3"), std::string::npos) << r.out;
  const auto same = run(tiny() + " --steps 3 --resume " + path("ck"));
  EXPECT_EQ(same.code, 0) << same.out;
  EXPECT_EQ(same.out.find("train loss"), std::string::npos) << same.out;  // no loss was measured
}

TEST_F(Checkpoints, DeeplyNestedTrainerStateIsRefusedNotACrash) {
  auto state = nlohmann::json::parse(read(dir_ / "ck" / "trainer_state.json"));
  state["seed"] = "PLACEHOLDER";
  std::string text = state.dump();
  text.replace(text.find("\"PLACEHOLDER\""), 13, std::string(100000, '[') + std::string(100000, ']'));
  reliability::replace_in_checkpoint(dir_ / "ck", "trainer_state.json", text);
  const auto r = run(tiny() + " --steps 5 --resume " + path("ck"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("trainer_state.json: JSON nested deeper than 64 levels"), std::string::npos) << r.out;
}

// Weights that turn non-finite before the loss has been non-finite for long
// enough to stop the run are caught at its end, saved or not.
TEST_F(Checkpoints, NonFiniteWeightsAtTheEndFailTheRunWithoutSave) {
  for (const char* model : {"gpt", "llama", "bert"}) {
    std::string args = tiny();
    args.replace(args.find("--model gpt"), 11, std::string("--model ") + model);
    const auto r = run(args + " --steps 2 --lr 1e300 --grad-clip 0");
    EXPECT_EQ(r.code, 1) << model << "\n" << r.out;
    EXPECT_NE(r.out.find("training diverged at step 2"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("holds non-finite values"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("final:"), std::string::npos) << r.out;
  }
}

// Optimizer state and a loss scale no run could have written, with
// consistent CRCs, are refused by name on resume; the checkpoint stays.
TEST_F(Checkpoints, OptimizerStateOutOfRangeIsRefusedOnLoad) {
  const fs::path ck = dir_ / "ck";
  const std::string opt = read(ck / "optimizer.safetensors");
  const nlohmann::json header = safetensors_header(opt);
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name.size() < 11 || name.compare(name.size() - 11, 11, ".exp_avg_sq") != 0) continue;
    fs::remove_all(dir_ / "bad");
    fs::copy(ck, dir_ / "bad");
    reliability::replace_in_checkpoint(dir_ / "bad", "optimizer.safetensors", with_tensor_value(opt, name, -1.0f));
    const auto r = run(tiny() + " --steps 5 --resume " + path("bad") + " --save " + path("bad"));
    EXPECT_EQ(r.code, 2) << name << "\n" << r.out;
    EXPECT_NE(r.out.find("'" + name + "' holds -1.0 at element 0 (must be >= 0)"), std::string::npos) << r.out;
    EXPECT_EQ(read(dir_ / "bad" / "optimizer.safetensors"), with_tensor_value(opt, name, -1.0f));
  }
  for (const double scale : {5e-324, 1e300}) {
    fs::remove_all(dir_ / "bad");
    fs::copy(ck, dir_ / "bad");
    auto state = nlohmann::json::parse(read(ck / "trainer_state.json"));
    state["loss_scaler"]["scale"] = scale;
    reliability::replace_in_checkpoint(dir_ / "bad", "trainer_state.json", state.dump());
    const auto r = run(tiny() + " --steps 5 --resume " + path("bad"));
    EXPECT_EQ(r.code, 2) << scale << "\n" << r.out;
    EXPECT_NE(r.out.find("saved loss scale"), std::string::npos) << r.out;
  }
}

// Resuming under another recipe names the first setting that differs, in a
// message of a line, not the two whole recipes.
TEST_F(Checkpoints, ResumeUnderAnotherRecipeNamesTheDifference) {
  const auto r = run(tiny("bf16-amp") + " --steps 5 --resume " + path("ck"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("the checkpoint was trained with recipe \"fp32\", this run uses \"bf16-amp\" ("),
            std::string::npos)
      << r.out;
  EXPECT_LT(r.out.size(), 400u) << r.out;
}

// A config inside every bound whose model still cannot be allocated (2^24
// BERT layers of width 2, in an address space capped at 3 GB) unwinds to
// the documented "out of memory", exit 1: no destructor on the way may throw
// (the allocator's block cache frees instead of caching when it cannot grow).
TEST_F(Checkpoints, AModelTooLargeToAllocateIsOutOfMemoryNotAnAbort) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the cap allows";
#else
  fs::create_directories(dir_ / "huge");
  reliability::write(dir_ / "huge" / "config.json",
                     R"({"model_type":"bert","vocab_size":260,"max_position_embeddings":16,"hidden_size":2,)"
                     R"("num_hidden_layers":16777216,"num_attention_heads":1,"intermediate_size":8,"type_vocab_size":2})");
  const auto r = reliability::run_shell("ulimit -v 3000000; " + std::string(MANTISSA_CLI) + " eval --checkpoint " +
                                        path("huge") + " --data " + path("corpus.txt"));
  EXPECT_EQ(r.signal, 0) << r.out;
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("out of memory"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("terminate called"), std::string::npos) << r.out;
#endif
}

TEST_F(Checkpoints, LossScalingThatSkipsEveryStepFails) {
  const auto r = run(tiny("fp16-amp") + " --steps 5 --init-scale 1e30 --max-scale 1e30 --save " + path("fp16"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("all 5 steps were skipped"), std::string::npos) << r.out;
}

}  // namespace
