// `mantissa experiment` when things go wrong, through the CLI on a tiny GPT:
// a recipe that diverges is reported with the step of its first non-finite
// loss and the study goes on; Ctrl-C (SIGINT) mid-study exits 130 and leaves
// a report of exactly the runs that finished, which --resume then keeps.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs the CLI with `args` (split on spaces), output to `log`; returns its pid.
pid_t spawn(const std::string& args, const fs::path& log) {
  std::vector<std::string> words{MANTISSA_CLI};
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    if (!std::freopen(log.c_str(), "w", stdout)) ::_exit(126);
    ::dup2(::fileno(stdout), 2);
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class ExperimentFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mantissa_experiment_failures_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::mt19937_64 rng(11);
    const char* words[] = {"she ", "was ", "not ", "in ", "the ", "habit ", "of ", "walking", ".\n", ", "};
    std::string text;
    while (text.size() < 8000) text += words[rng() % std::size(words)];
    std::ofstream(dir_ / "corpus.txt") << text;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tiny(const std::string& recipes, int64_t tokens, const std::string& out) const {
    return "experiment --recipes " + recipes + " --mlp-recipes none --tokens " + std::to_string(tokens) +
           " --layers 1 --d-model 16 --heads 2 --seq-len 16 --batch-size 2 --threads 1 --data " +
           (dir_ / "corpus.txt").string() + " --out " + (dir_ / out).string();
  }
  fs::path dir_;
};

}  // namespace

TEST_F(ExperimentFailures, DivergedRecipeIsReportedWithItsStepAndTheStudyContinues) {
  // fp16-pure keeps its weights in fp16: at a learning rate of 1e5 the first
  // update overflows them to inf. unit-fp32 has its own (unit) learning rate
  // and must still train.
  const fs::path log = dir_ / "diverge.log";
  const int code = wait_exit_code(spawn(tiny("fp16-pure,unit-fp32", 1280, "out") + " --lr-standard 100000", log));
  ASSERT_EQ(code, 0) << slurp(log);

  // Independent reference: the first step whose loss the run's own metrics file records as non-finite (null).
  const fs::path run = dir_ / "out" / "runs" / "gpt-fp16-pure-s1337";
  int64_t first_bad = 0, last_step = 0;
  std::ifstream metrics(run / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    last_step = j["step"].get<int64_t>();
    if (first_bad == 0 && j["loss"].is_null()) first_bad = last_step;
  }
  ASSERT_GT(first_bad, 0) << "fp16-pure did not produce a non-finite loss";
  const auto result = nlohmann::json::parse(slurp(run / "result.json"));
  EXPECT_EQ(result["status"], "diverged");
  EXPECT_EQ(result["diverged_at"].get<int64_t>(), first_bad);
  EXPECT_LT(last_step, 40);  // stopped early, not trained to the end (1280 / 32 = 40 steps)

  const std::string md = slurp(dir_ / "out" / "report.md");
  EXPECT_NE(md.find("| fp16-pure | — | — | **yes** (step " + std::to_string(first_bad) + ") |"), std::string::npos) << md;
  const auto unit = nlohmann::json::parse(slurp(dir_ / "out" / "runs" / "gpt-unit-fp32-s1337" / "result.json"));
  EXPECT_EQ(unit["status"], "ok");
  EXPECT_EQ(unit["steps"], 40);
  EXPECT_TRUE(std::isfinite(unit["val_bpc"].get<double>()));
  char cell[64];
  std::snprintf(cell, sizeof cell, "| unit-fp32 | %.3f |", unit["val_bpc"].get<double>());
  EXPECT_NE(md.find(cell), std::string::npos) << cell << "\n" << md;
  EXPECT_NE(slurp(log).find("DIVERGED at step " + std::to_string(first_bad)), std::string::npos) << slurp(log);
}

TEST_F(ExperimentFailures, CtrlCKeepsFinishedRunsWritesAConsistentReportAndResumeSkipsThem) {
  // Two runs of 6000 steps of a 1-layer d16 GPT (about a second each on an idle machine):
  // SIGINT as soon as the second one has printed its first progress line lands inside it.
  const std::string args = tiny("fp32,bf16-amp", 6000 * 32, "out");
  const fs::path log = dir_ / "interrupt.log";
  const pid_t pid = spawn(args, log);
  const fs::path first = dir_ / "out" / "runs" / "gpt-fp32-s1337" / "result.json";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (slurp(log).find("[2/2] gpt bf16-amp seed 1337  step") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(fs::exists(first)) << slurp(log);
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  const int code = wait_exit_code(pid);
  const std::string out = slurp(log);
  ASSERT_EQ(code, 130) << out;  // the shell's convention for SIGINT
  EXPECT_NE(out.find("bf16-amp seed 1337: interrupted, not kept"), std::string::npos) << out;
  EXPECT_NE(out.find("interrupted: 1 runs trained"), std::string::npos) << out;

  // Exactly the finished run is kept; no half-written run folder remains.
  std::vector<std::string> kept;
  for (const auto& e : fs::directory_iterator(dir_ / "out" / "runs")) kept.push_back(e.path().filename().string());
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0], "gpt-fp32-s1337");
  const auto fp32 = nlohmann::json::parse(slurp(first));
  EXPECT_EQ(fp32["status"], "ok");
  EXPECT_EQ(fp32["steps"], 6000);

  // The report says it was interrupted and shows the finished run's own number, and only that run.
  const std::string md = slurp(dir_ / "out" / "report.md");
  EXPECT_NE(md.find("**Interrupted**"), std::string::npos) << md;
  char cell[64];
  std::snprintf(cell, sizeof cell, "| fp32 | %.3f |", fp32["val_bpc"].get<double>());
  EXPECT_NE(md.find(cell), std::string::npos) << cell << "\n" << md;
  EXPECT_EQ(md.find("| bf16-amp |"), std::string::npos) << md;
  EXPECT_NE(slurp(dir_ / "out" / "report.html").find("<strong>Interrupted</strong>"), std::string::npos);

  // --resume keeps the finished run without retraining it (same settings, only that recipe).
  const auto stamp = fs::last_write_time(first);
  const fs::path log2 = dir_ / "resume.log";
  ASSERT_EQ(wait_exit_code(spawn(tiny("fp32", 6000 * 32, "out") + " --resume", log2)), 0) << slurp(log2);
  EXPECT_NE(slurp(log2).find("0 runs trained, 1 kept from earlier"), std::string::npos) << slurp(log2);
  EXPECT_EQ(fs::last_write_time(first), stamp);
  EXPECT_EQ(slurp(dir_ / "out" / "report.md").find("**Interrupted**"), std::string::npos);
}
