// The study's time estimates (study/experiment_eta.hpp): work in
// floating-point operations per run, seconds per operation from the most
// specific measurement available.
#include "mantissa/study/experiment_eta.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "mantissa/nn/models.hpp"

namespace mantissa::study {

namespace {

constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
constexpr double kGptVocab = 256;            // byte-level
constexpr double kMnistInputs = 28.0 * 28.0;
constexpr double kMnistClasses = 10;
constexpr double kMnistTestImages = 10000;  // the MLP evaluates on the whole test set

double evaluations(const train::TrainConfig& c) {
  if (c.eval_every <= 0) return 1;
  return std::floor(static_cast<double>(c.steps - 1) / static_cast<double>(c.eval_every)) + 1;  // + the final one
}

}  // namespace

double run_flops(const train::TrainConfig& c) {
  const double d = static_cast<double>(c.d_model), layers = static_cast<double>(c.layers);
  const double batch = static_cast<double>(c.batch_size), steps = static_cast<double>(c.steps);
  const nn::ModelKind* kind = nn::find_model_kind(c.model);
  if (kind && kind->task == nn::Task::classifier) {
    // Forward of one example: 784 -> d, (layers - 1) x d -> d, d -> 10.
    const double forward = 2 * (kMnistInputs * d + std::max(0.0, layers - 1) * d * d + d * kMnistClasses);
    return 3 * forward * batch * steps + forward * kMnistTestImages * evaluations(c);
  }
  // GPT forward per token: 12 d^2 per block in matrix products (qkv, proj,
  // 4x MLP up and down), the attention scores and mix over the window, and
  // the readout.
  const double t = static_cast<double>(c.seq_len);
  const double forward = 2 * (12 * layers * d * d + 2 * layers * t * d + d * kGptVocab);
  const double tokens_per_batch = batch * t;
  return 3 * forward * tokens_per_batch * steps + forward * tokens_per_batch * static_cast<double>(c.eval_batches) * evaluations(c);
}

StudyClock::StudyClock(const std::vector<RunSpec>& runs) {
  items_.reserve(runs.size());
  for (const RunSpec& r : runs) items_.push_back({r.task, r.recipe, run_flops(r.config), State::pending, 0});
}

void StudyClock::skip(size_t i) { items_.at(i).state = State::skipped; }

void StudyClock::finished(size_t i, double seconds) {
  items_.at(i).state = State::done;
  items_[i].seconds = seconds;
}

void StudyClock::between_runs(double seconds) {
  between_sum_ += seconds;
  ++between_count_;
}

StudyClock::Live StudyClock::live(size_t i, double fraction, double elapsed) const {
  Live l;
  if (i >= items_.size()) return l;
  l.item = &items_[i];
  if (fraction > 0 && elapsed > 0 && items_[i].flops > 0) l.rate = elapsed / (fraction * items_[i].flops);
  return l;
}

double StudyClock::rate_for(const Item& target, const Live& live) const {
  // Seconds per operation of every (task, recipe) measured: finished runs
  // pooled, the running run where its recipe has no finished run yet.
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> pooled;  // seconds, flops
  for (const Item& it : items_)
    if (it.state == State::done && it.flops > 0) {
      auto& p = pooled[{it.task, it.recipe}];
      p.first += it.seconds;
      p.second += it.flops;
    }
  std::map<std::pair<std::string, std::string>, double> rates;
  for (const auto& [key, p] : pooled) rates[key] = p.first / p.second;
  if (live.item && live.rate > 0) rates.try_emplace({live.item->task, live.item->recipe}, live.rate);
  if (rates.empty()) return kUnknown;

  if (auto it = rates.find({target.task, target.recipe}); it != rates.end()) return it->second;
  double task_sum = 0, all_sum = 0;
  int task_n = 0;
  for (const auto& [key, rate] : rates) {
    all_sum += rate;
    if (key.first == target.task) {
      task_sum += rate;
      ++task_n;
    }
  }
  if (task_n) return task_sum / task_n;
  for (const auto& [key, rate] : rates)
    if (key.second == target.recipe) return rate;
  return all_sum / static_cast<double>(rates.size());
}

double StudyClock::estimate(size_t j, size_t i, double fraction, double elapsed) const {
  const Item& target = items_.at(j);
  if (target.state != State::pending) return 0;
  return rate_for(target, live(i, fraction, elapsed)) * target.flops;
}

StudyEta StudyClock::eta(size_t i, double fraction, double elapsed) const {
  StudyEta e;
  const Live l = live(i, fraction, elapsed);
  const Item& current = items_.at(i);
  if (l.rate > 0) e.run_left = elapsed * (1 - fraction) / fraction;
  else if (const double total = rate_for(current, l) * current.flops; std::isfinite(total))
    e.run_left = std::max(0.0, total - elapsed);
  else e.run_left = kUnknown;

  double ahead = e.run_left;
  int reports = 1;  // the report written after the running run
  for (size_t j = i + 1; j < items_.size(); ++j) {
    if (items_[j].state != State::pending) continue;
    ahead += rate_for(items_[j], l) * items_[j].flops;
    ++reports;
  }
  if (between_count_) ahead += reports * between_sum_ / between_count_;
  e.study_left = ahead;

  double spent = elapsed;
  for (const Item& it : items_)
    if (it.state == State::done) spent += it.seconds;
  if (between_count_) spent += between_sum_;
  e.done = std::isfinite(ahead) && spent + ahead > 0 ? spent / (spent + ahead) : kUnknown;
  return e;
}

}  // namespace mantissa::study
