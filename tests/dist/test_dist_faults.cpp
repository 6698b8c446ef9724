// Data-parallel runs of the `mantissa` program under `mpirun -np 2`:
// stop + resume with the same ranks continues bit for bit, and from a
// different number of ranks it continues; a killed or hung rank ends the job
// within bounded time and the last checkpoint stays loadable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "mantissa/dist/group.hpp"
#include "mantissa/train/checkpoint.hpp"

namespace fs = std::filesystem;

namespace {

struct Dir {
  fs::path path;
  Dir() {
    path = fs::temp_directory_path() / ("mantissa_dist_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(std::random_device{}()));
    fs::create_directories(path);
    std::mt19937_64 rng(21);
    const char* words[] = {"the ", "of ", "and ", "Emma ", "Knightley ", "said ", "was ", "a ", "to ", ". "};
    std::ofstream f(path / "corpus.txt");
    for (size_t n = 0; n < 40000;) {
      const char* w = words[rng() % std::size(words)];
      f << w;
      n += std::strlen(w);
    }
  }
  ~Dir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

bool mpi_ready() { return mantissa::dist::Group::mpi_built() && std::system("command -v mpirun >/dev/null 2>&1") == 0; }

std::string train_args(const Dir& d, int64_t batch) {
  return std::string(MANTISSA_CLI) + " train --model gpt --layers 1 --d-model 32 --heads 2 --seq-len 16 --batch-size " +
         std::to_string(batch) + " --eval-every 0 --eval-batches 1 --threads 1 --recipe bf16-amp --data " +
         (d / "corpus.txt");
}

// The launcher; mpirun(n) runs one program on n ranks.
std::string mpirun_local() {
  return "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 bash " MANTISSA_SOURCE_DIR "/scripts/mpirun-local.sh ";
}
std::string mpirun(int ranks) { return mpirun_local() + "-np " + std::to_string(ranks) + " "; }

int sh(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  std::ifstream f(metrics);
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(DistRun, StopAndResumeContinueBitForBitWithTheSameRanksAndRunWithOthers) {
  if (!mpi_ready()) GTEST_SKIP() << "built without MPI or mpirun missing";
  Dir d;
  const std::string base = train_args(d, 8) + " --steps 6";
  ASSERT_EQ(sh(mpirun(2) + base + " --metrics " + (d / "whole.jsonl") + " > " + (d / "whole.log") + " 2>&1"), 0)
      << read(d / "whole.log");
  ASSERT_EQ(sh(mpirun(2) + base + " --stop-after 3 --save " + (d / "ckpt") + " --metrics " + (d / "parts.jsonl") +
               " > " + (d / "a.log") + " 2>&1"), 0) << read(d / "a.log");
  ASSERT_TRUE(mantissa::train::checkpoint_exists(d / "ckpt"));
  ASSERT_EQ(sh(mpirun(2) + base + " --resume " + (d / "ckpt") + " --metrics " + (d / "parts.jsonl") + " > " +
               (d / "b.log") + " 2>&1"), 0) << read(d / "b.log");
  const auto whole = losses(d / "whole.jsonl"), parts = losses(d / "parts.jsonl");
  ASSERT_EQ(whole.size(), 6u);
  EXPECT_EQ(parts, whole);  // bit-identical doubles
  // One process resumes the 2-rank checkpoint at the same global batch.
  ASSERT_EQ(sh(base + " --resume " + (d / "ckpt") + " --metrics " + (d / "one.jsonl") + " > " + (d / "c.log") + " 2>&1"), 0)
      << read(d / "c.log");
  const auto one = losses(d / "one.jsonl");
  ASSERT_EQ(one.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(one[i], whole[3 + i], 1e-3 * whole[3 + i]);
}

// The pid of the rank started with this tag and rank, or -1.
pid_t find_rank(const std::string& tag, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string env = read(e.path().string() + "/environ");
    if (env.find("MANTISSA_TEST_TAG=" + tag) == std::string::npos) continue;
    if (env.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') == std::string::npos) continue;
    if (read(e.path().string() + "/comm").rfind("mantissa", 0) != 0) continue;
    return static_cast<pid_t>(std::stol(e.path().filename().string()));
  }
  return -1;
}

// Starts a long 2-rank run saving every 2 steps, waits for its first
// checkpoint, signals rank 1, and returns mpirun's exit code and the seconds
// it took to stop after the signal.
std::pair<int, double> fault_run(const Dir& d, int signal, const std::string& extra) {
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(signal);
  const std::string cmd = "MANTISSA_TEST_TAG=" + tag + " " + mpirun(2) + train_args(d, 8) +
                          " --steps 100000 --save-every 2 --save " + (d / "ckpt") + " " + extra + " > " +
                          (d / "fault.log") + " 2>&1";
  const pid_t child = ::fork();
  if (child == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto start = std::chrono::steady_clock::now();
  auto waited = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  pid_t victim = -1;
  while (waited() < 120 && (victim < 0 || !mantissa::train::checkpoint_exists(d / "ckpt"))) {
    if (victim < 0) victim = find_rank(tag, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(victim, 0) << "rank 1 not found";
  EXPECT_TRUE(mantissa::train::checkpoint_exists(d / "ckpt")) << read(d / "fault.log");
  if (victim > 0) ::kill(victim, signal);
  const auto signalled = std::chrono::steady_clock::now();
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (waited() > 240) {
      ::kill(victim, SIGKILL);
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      ADD_FAILURE() << "the job did not stop";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (signal == SIGSTOP && victim > 0) ::kill(victim, SIGKILL);  // in case the launcher left it
  const double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), stop_s};
}

void expect_resumable(const Dir& d) {
  // The last checkpoint is complete; one process continues from it.
  ASSERT_TRUE(mantissa::train::checkpoint_exists(d / "ckpt"));
  const std::string state = read(d / "ckpt/trainer_state.json");
  const int64_t step = nlohmann::json::parse(state).at("step").get<int64_t>();
  EXPECT_GE(step, 2);
  EXPECT_EQ(sh(train_args(d, 8) + " --steps " + std::to_string(step + 1) + " --resume " + (d / "ckpt") + " > " +
               (d / "resume.log") + " 2>&1"), 0)
      << read(d / "resume.log");
}

TEST(DistRun, AKilledRankStopsTheJobAndTheCheckpointStaysValid) {
  if (!mpi_ready()) GTEST_SKIP() << "built without MPI or mpirun missing";
  Dir d;
  const auto [rc, seconds] = fault_run(d, SIGKILL, "");
  EXPECT_NE(rc, 0) << read(d / "fault.log");
  EXPECT_LT(seconds, 60.0);
  expect_resumable(d);
}

// Ranks launched with different settings (mpirun's "A : B" form) stop at
// start-up with exit 2 and the setting named, before any step.
TEST(DistRun, RanksThatDisagreeStopAtStartUpNamingTheSetting) {
  if (!mpi_ready()) GTEST_SKIP() << "built without MPI or mpirun missing";
  Dir d;
  const std::string one = "-np 1 " + train_args(d, 4) + " --steps 2 ";
  for (const auto& [a, b, what] : {std::tuple<std::string, std::string, std::string>{"--seed 1", "--seed 2", "--seed"},
                                   {"--d-model 32", "--d-model 64", "--d-model"},
                                   {"--recipe bf16-amp", "--recipe fp16-amp", "--recipe"}}) {
    const std::string log = d / "disagree.log";
    const int rc = sh(mpirun_local() + one + a + " : " + one + b + " > " + log + " 2>&1");
    const std::string out = read(log);
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find("data-parallel ranks disagree on " + what + " (rank 1's differs from rank 0's)"), std::string::npos)
        << out;
    EXPECT_EQ(out.find("step 1/"), std::string::npos) << out;
  }
}

TEST(DistRun, AHungRankTimesOutWithAMessage) {
  if (!mpi_ready()) GTEST_SKIP() << "built without MPI or mpirun missing";
  Dir d;
  const auto [rc, seconds] = fault_run(d, SIGSTOP, "--comm-timeout 3");
  const std::string log = read(d / "fault.log");
  EXPECT_NE(rc, 0) << log;
  EXPECT_NE(log.find("did not complete within 3 s"), std::string::npos) << log;
  EXPECT_LT(seconds, 60.0);
  expect_resumable(d);
}

}  // namespace
