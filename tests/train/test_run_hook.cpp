// train::run's record hook (RunOptions::on_record): it sees exactly the lines
// of the metrics file, in order, and an exception it throws ends the run with
// every line up to that record already in the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include "mantissa/data/text.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/train/run.hpp"
#include "toy_model.hpp"

using namespace mantissa;

namespace {

std::string corpus_text() {
  std::mt19937_64 rng(5);
  const char* words[] = {"the ", "of ", "and ", "Emma ", "said ", "was ", "a ", ". "};
  std::string s;
  while (s.size() < 8000) s += words[rng() % std::size(words)];
  return s;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

struct Toy {
  explicit Toy(const data::TextCorpus& corpus) : model(256, 3), source(corpus, 2, 8, 11), val(corpus, 2, 8, 2) {
    opt = optim::make_optimizer(optim::OptimizerConfig{}, model.parameters());
    trainer = std::make_unique<train::Trainer>(model, *opt, source, &val, recipe::find_recipe("fp32"),
                                               train::TrainerOptions{});
  }
  toy::Bigram model;
  data::TextWindows source;
  data::TextValidation val;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<train::Trainer> trainer;
};

}  // namespace

TEST(RunHook, SeesTheMetricsFileLinesAndCanStopTheRun) {
  const auto corpus = data::TextCorpus::from_bytes(corpus_text(), "generated");
  const std::string path = (std::filesystem::temp_directory_path() / "mantissa_test_run_hook.jsonl").string();
  {
    Toy t(corpus);
    train::RunOptions o;
    o.steps = 4;
    o.eval_every = 2;
    o.log = nullptr;
    o.metrics_path = path;
    o.run_info_json = R"({"what":"test"})";
    std::vector<std::string> seen;
    o.on_record = [&](const std::string& line) { seen.push_back(line); };
    train::run(*t.trainer, o);
    // run line, 4 steps, evaluations after steps 2 and 4
    ASSERT_EQ(seen.size(), 7u);
    EXPECT_EQ(seen, read_lines(path));
    EXPECT_EQ(seen[0], R"({"run":{"what":"test"}})");
  }
  {
    Toy t(corpus);
    train::RunOptions o;
    o.steps = 10;
    o.log = nullptr;
    o.metrics_path = path;
    int calls = 0;
    o.on_record = [&](const std::string&) {
      if (++calls == 3) throw std::runtime_error("stop");
    };
    EXPECT_THROW(train::run(*t.trainer, o), std::runtime_error);
    EXPECT_EQ(t.trainer->step(), 3);
    EXPECT_EQ(read_lines(path).size(), 3u);  // the third record was written before the hook threw
  }
  std::filesystem::remove(path);
}
