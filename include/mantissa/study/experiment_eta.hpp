// Time estimates of the recipe study's progress display.
//
// Recipes differ by up to 4x in speed and every run also spends time on
// evaluation and on building its session, so "seconds per step of the
// current run x steps left" is wrong in both directions. Instead every run's
// work is estimated in floating-point operations from its configuration
// (training steps at three forward passes each plus its evaluations, see
// run_flops), and turned into seconds with a measured rate (wall seconds per
// operation, everything of a run included), taken from the most specific
// measurement there is:
//   1. finished runs of the same task and recipe (other seeds);
//   2. the running run, when it is that task and recipe;
//   3. the mean rate of the task's recipes measured so far;
//   4. the same recipe measured on the other task;
//   5. the mean of every rate measured so far.
// Before anything is measured the estimate is unknown (NaN), shown as "?".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mantissa/train/config.hpp"
#include "mantissa/study/experiment.hpp"

namespace mantissa::study {

// Floating-point operations of a whole run: steps x 3 forward passes of a
// batch, plus the evaluations (every eval_every steps and at the end). The
// Fashion-MNIST MLP evaluates on the whole test set, taken as 10,000 images.
double run_flops(const train::TrainConfig& c);

struct StudyEta {
  double run_left = 0;    // seconds until the running run ends
  double study_left = 0;  // seconds until the study ends (the running run included)
  double done = 0;        // share of the study's time spent so far, in [0, 1]
};

class StudyClock {
 public:
  // `runs` in execution order (ExperimentPlan::runs).
  explicit StudyClock(const std::vector<RunSpec>& runs);

  // Run i needs no time: kept from an earlier invocation, or not available.
  void skip(size_t i);
  // Run i ended (finished or diverged) after `seconds` of wall time.
  void finished(size_t i, double seconds);
  // Run i failed or was abandoned: no rate from it, no time ahead for it.
  void dropped(size_t i) { skip(i); }
  // Wall time spent between runs (the report rewritten after each run);
  // the mean is added once per run still ahead.
  void between_runs(double seconds);

  // Estimates while run i is `fraction` (0..1, by steps) done after
  // `elapsed` seconds. NaN fields when nothing is measured yet.
  StudyEta eta(size_t i, double fraction, double elapsed) const;
  // Seconds the not yet started run j is expected to take (NaN: unknown),
  // given run i's progress as the live measurement (i == npos: none).
  double estimate(size_t j, size_t i, double fraction, double elapsed) const;

  static constexpr size_t npos = static_cast<size_t>(-1);

 private:
  enum class State { pending, done, skipped };
  struct Item {
    std::string task, recipe;
    double flops = 0;
    State state = State::pending;
    double seconds = 0;
  };
  struct Live {
    const Item* item = nullptr;
    double rate = 0;  // seconds per operation of the running run; 0: none
  };
  Live live(size_t i, double fraction, double elapsed) const;
  double rate_for(const Item& target, const Live& live) const;

  std::vector<Item> items_;
  double between_sum_ = 0;
  int between_count_ = 0;
};

}  // namespace mantissa::study
