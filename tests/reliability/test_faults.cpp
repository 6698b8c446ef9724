// Faults injected into short training runs with checkpoints: kill -9 at
// seeded random moments (the resumed run's losses equal an uninterrupted
// run's, bit for bit), a full disk (ENOSPC) or an I/O error (EIO) during a
// save (the previous checkpoint still evaluates to the same numbers).
#include <chrono>
#include <map>
#include <random>
#include <string>

#include "reliability/cli_util.hpp"

namespace {

using reliability::read;
using reliability::run;
using reliability::losses;
using reliability::run_shell;
namespace fs = std::filesystem;

class Faults : public reliability::Scratch {};

TEST_F(Faults, KillNineAnywhereThenResumeIsBitIdentical) {
  const int steps = 16;
  const std::string common = tiny("bf16-amp") + " --steps " + std::to_string(steps) + " --save-every 1";
  ASSERT_EQ(run(common + " --metrics " + path("straight.jsonl")).code, 0);
  const auto straight = losses(path("straight.jsonl"));
  ASSERT_EQ(straight.size(), static_cast<size_t>(steps));

  std::mt19937 rng(18);
  std::uniform_int_distribution<int> delay_ms(20, 400);
  int kills = 0;
  for (int cycle = 0; cycle < 12; ++cycle) {
    const bool have = fs::exists(dir_ / "ck" / "COMPLETE");
    const std::string cmd = "timeout -s KILL " + std::to_string(delay_ms(rng) / 1000.0) + " " + MANTISSA_CLI + " " +
                            common + " --save " + path("ck") + " --metrics " + path("killed.jsonl") +
                            (have ? " --resume " + path("ck") : "");
    const auto r = run_shell(cmd);
    if (r.code == 0) break;  // finished before the kill
    ASSERT_EQ(r.code, 137) << "killed runs exit 128+9 through timeout\n" << r.out;
    ++kills;
  }
  // Whatever was left, finish it.
  const bool have = fs::exists(dir_ / "ck" / "COMPLETE");
  const auto last = run(common + " --save " + path("ck") + " --metrics " + path("killed.jsonl") +
                        (have ? " --resume " + path("ck") : ""));
  ASSERT_EQ(last.code, 0) << last.out;
  const auto killed = losses(path("killed.jsonl"));
  for (const auto& [step, loss] : killed) EXPECT_EQ(loss, straight.find(step)->second) << "step " << step;
  for (int s = 1; s <= steps; ++s) EXPECT_GT(killed.count(s), 0u) << "step " << s << " never ran";
  RecordProperty("kills", kills);
  std::printf("kill -9 cycles that hit a running process: %d\n", kills);
}

TEST_F(Faults, FullDiskOrIoErrorDuringSaveKeepsThePreviousCheckpoint) {
  ASSERT_EQ(run(tiny() + " --steps 3 --save " + path("ck")).code, 0);
  const std::string eval = "eval --checkpoint " + path("ck") + " --data " + path("corpus.txt") + " --seq-len 16";
  const auto before = run(eval);
  ASSERT_EQ(before.code, 0) << before.out;
  const std::string model = read(dir_ / "ck" / "model.safetensors");
  // Each file of the save fails in turn: the 1st, 3rd and 6th write (model,
  // optimizer state, the manifest last).
  for (const char* fault : {"ENOSPC:1", "EIO:3", "ENOSPC:6", "EIO:6"}) {
    const auto r = run_shell(std::string("MANTISSA_FAULT_WRITE=") + fault + " " + MANTISSA_CLI + " " + tiny() +
                             " --steps 5 --resume " + path("ck") + " --save " + path("ck"));
    EXPECT_EQ(r.code, 1) << fault << "\n" << r.out;
    const std::string want = std::string(fault).rfind("EIO", 0) == 0 ? "Input/output error" : "No space left on device";
    EXPECT_NE(r.out.find(want), std::string::npos) << fault << "\n" << r.out;
    EXPECT_EQ(read(dir_ / "ck" / "model.safetensors"), model) << fault;
    const auto after = run(eval);
    EXPECT_EQ(after.code, 0) << after.out;
    EXPECT_EQ(after.out, before.out) << fault;
  }
  // With the disk back, the same resume saves and the next one continues.
  const auto ok = run(tiny() + " --steps 5 --resume " + path("ck") + " --save " + path("ck"));
  EXPECT_EQ(ok.code, 0) << ok.out;
}

}  // namespace
