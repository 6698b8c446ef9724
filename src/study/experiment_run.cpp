// One run of the recipe study: build the session, train with progress and
// interrupt checks, evaluate, and collect everything the report needs.
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mantissa/recipe/recipe.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/nn/tasks.hpp"
#include "mantissa/unit/stats.hpp"
#include "mantissa/tensor/memory.hpp"
#include "mantissa/data/tokens.hpp"
#include "mantissa/study/experiment.hpp"
#include "study/timing.hpp"
#include "mantissa/study/experiment_eta.hpp"
#include "mantissa/train/run.hpp"
#include "mantissa/train/session.hpp"

namespace mantissa::study {

namespace {

volatile std::sig_atomic_t g_interrupt = 0;
using Handler = void (*)(int);
Handler g_old_int = SIG_DFL, g_old_term = SIG_DFL;

extern "C" void on_interrupt(int) { g_interrupt = 1; }

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s % 3600 / 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

// The progress line after a step: this run's and the study's estimates.
// `fraction` and `elapsed` count from the end of the first step (which also
// builds kernels and caches), so setup does not inflate the rate.
void show_progress(const RunProgress& progress, const train::StepMetrics& m, int64_t steps, double fraction, double elapsed) {
  StudyEta e;
  if (progress.clock) {
    e = progress.clock->eta(progress.index, fraction, elapsed);
  } else {
    e.run_left = fraction > 0 ? elapsed * (1 - fraction) / fraction : report::kNaN;
    e.study_left = e.run_left;
    e.done = report::kNaN;
  }
  const std::string done = std::isfinite(e.done) ? std::to_string(static_cast<int>(100 * e.done)) + "%" : "?%";
  char line[400];
  std::snprintf(line, sizeof line, "%s  step %ld/%ld  loss %.4f%s  run ETA %s  |  study %s done, ETA %s",
                progress.label.c_str(), static_cast<long>(m.step), static_cast<long>(steps), m.loss,
                m.skipped ? " (skipped)" : "", format_duration(e.run_left).c_str(), done.c_str(),
                format_duration(e.study_left).c_str());
  if (progress.terminal) std::fprintf(progress.log, "\r\033[K%s", line);
  else if (m.step == 1 || m.step % std::max<int64_t>(1, steps / 5) == 0) std::fprintf(progress.log, "%s\n", line);
  std::fflush(progress.log);
}

// Test accuracy of a trained classifier (argmax of the logits).
double classifier_accuracy(nn::Model& model, const data::EvalSource& test) {
  int64_t correct = 0, count = 0;
  for (int64_t i = 0; i < test.num_batches(); ++i) {
    const nn::Batch b = test.batch(i);
    const Tensor logits = model.logits(b.inputs);
    const int64_t rows = logits.dim(0), classes = logits.dim(1);
    const int32_t* t = b.targets.data<int32_t>();
    for (int64_t r = 0; r < rows; ++r) {
      if (t[r] < 0) continue;
      const float* l = logits.f32() + r * classes;
      int64_t best = 0;
      for (int64_t k = 1; k < classes; ++k)
        if (l[k] > l[best]) best = k;
      correct += best == t[r];
      ++count;
    }
  }
  return count ? static_cast<double>(correct) / static_cast<double>(count) : report::kNaN;
}

// Exponents of every parameter gradient of one fresh training batch (loss
// per target, no loss scale): what an FP16 / FP8 gradient would have to hold.
report::ExponentCounts gradient_exponents(train::Session& s) {
  const nn::Batch batch = s.train->next();
  s.model->zero_grad();
  const int64_t targets = batch.targets.numel();
  s.model->forward_backward(batch, 1.0f / static_cast<float>(std::max<int64_t>(1, targets)));
  report::ExponentCounts e;
  e.what = "parameter gradients of the fp32 GPT after training (one batch, loss per token, no loss scale)";
  e.lo = -40;
  const int hi = 4;
  e.counts.assign(static_cast<size_t>(hi - e.lo + 1), 0);
  for (autograd::Parameter* p : s.model->parameters()) {
    const auto h = unit::exponent_histogram(p->grad.f32(), static_cast<size_t>(p->grad.numel()), e.lo, hi);
    for (size_t i = 0; i < h.counts.size(); ++i) e.counts[i] += h.counts[i];
    e.zeros += h.zeros;
    e.nonfinite += h.nonfinite;
  }
  s.model->zero_grad();
  return e;
}

}  // namespace

void install_interrupt_handler() {
  g_interrupt = 0;
  g_old_int = std::signal(SIGINT, on_interrupt);
  g_old_term = std::signal(SIGTERM, on_interrupt);
}
void restore_interrupt_handler() {
  std::signal(SIGINT, g_old_int == SIG_ERR ? SIG_DFL : g_old_int);
  std::signal(SIGTERM, g_old_term == SIG_ERR ? SIG_DFL : g_old_term);
}
bool interrupt_requested() { return g_interrupt != 0; }
void request_interrupt() { g_interrupt = 1; }
void clear_interrupt() { g_interrupt = 0; }

report::RunResult execute_run(const RunSpec& spec, const std::string& dir, const RunProgress& progress) {
  report::RunResult r;
  r.id = spec.id;
  r.task = spec.task;
  r.recipe = spec.recipe;
  r.seed = spec.seed;
  r.parametrisation = spec.parametrisation;
  r.lr = spec.config.lr;
  r.d_model = spec.config.d_model;
  r.steps_planned = spec.config.steps;
  if (!spec.available) {
    r.status = "not-available";
    r.error = spec.unavailable_reason;
    return r;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_seconds();
  RunTimes times;
  reset_peak_memory();
  std::unique_ptr<train::Session> session;
  try {
    session = train::build_session(spec.config);
  } catch (const std::invalid_argument& e) {
    // A registered recipe this build cannot train yet (e.g. a parametrisation
    // the models do not implement): reported, not fatal.
    r.status = "not-available";
    r.error = e.what();
    return r;
  }
  train::Trainer& trainer = *session->trainer;

  // No directory (a data-parallel rank other than 0): nothing is written.
  std::ofstream metrics;
  if (!dir.empty()) {
    metrics.open(dir + "/metrics.jsonl", std::ios::trunc);
    if (!metrics) throw std::runtime_error("cannot write " + dir + "/metrics.jsonl");
  }
  metrics << nlohmann::json{{"run", {{"config", nlohmann::json::parse(train::config_to_json(session->config))},
                                      {"recipe", nlohmann::json::parse(recipe::recipe_to_json(session->recipe))},
                                      {"model", nlohmann::json::parse(session->model->config_json())},
                                      {"parameters", session->model->parameter_count()}}}}
                 .dump()
          << '\n';
  times.setup = since(t0);

  const int64_t steps = spec.config.steps;
  const int64_t diverge_after = std::min<int64_t>(20, std::max<int64_t>(3, steps / 10));
  const int64_t tail = std::clamp<int64_t>(steps / 10, 1, 50);  // steps averaged into the final training loss
  const int64_t thin = std::max<int64_t>(1, steps / 500);       // loss-scale curve resolution
  std::vector<double> recent;
  double timed_s = 0;
  int64_t timed_steps = 0, timed_tokens = 0, bad = 0;
  const bool classifier = nn::is_task(spec.task, nn::Task::classifier);  // its curve is the test loss
  // Token data: the metric is the loss in nats per (masked) token, and a run
  // that ends above ln V has learnt nothing.
  const bool per_token = session->val->per_token();
  if (per_token) r.divergence_threshold = std::log(static_cast<double>(data::model_vocab(*session->model)));
  auto evaluate = [&] {
    const auto te = std::chrono::steady_clock::now();
    const train::EvalMetrics e = trainer.evaluate();
    metrics << train::eval_metrics_json(e) << '\n';
    r.val_loss = e.val_loss;
    // bert: bits per masked character
    r.val_bpc = classifier ? report::kNaN : per_token ? e.val_loss : e.val_bpc;
    if (e.masked_accuracy >= 0) r.accuracy = e.masked_accuracy;
    r.val_curve.push_back({e.step, classifier || per_token ? e.val_loss : e.val_bpc});
    times.eval += since(te);
  };
  auto after_first_step = std::chrono::steady_clock::now();
  while (trainer.step() < steps) {
    const train::StepMetrics m = trainer.train_step();
    metrics << train::step_metrics_json(m) << '\n';
    times.train += m.seconds;
    r.steps = m.step;
    r.tokens += m.tokens;
    if (m.step == 1) after_first_step = std::chrono::steady_clock::now();
    else {
      timed_s += m.seconds;
      timed_tokens += m.tokens;
      ++timed_steps;
    }
    recent.push_back(m.loss);
    if (static_cast<int64_t>(recent.size()) > tail) recent.erase(recent.begin());
    if (m.step % thin == 0 || m.skipped || m.step == 1) r.loss_scale_curve.push_back({m.step, m.loss_scale});
    bad = std::isfinite(m.loss) ? 0 : bad + 1;
    if (progress.log) {
      const double fraction = steps > 1 ? static_cast<double>(m.step - 1) / static_cast<double>(steps - 1) : 0.0;
      show_progress(progress, m, steps, fraction, since(after_first_step));
    }
    if (bad >= diverge_after) {
      r.status = "diverged";
      r.diverged_at = m.step - bad + 1;  // the first of the non-finite losses in a row
      break;
    }
    if (spec.config.eval_every > 0 && m.step % spec.config.eval_every == 0 && m.step != steps) evaluate();
    if (interrupt_requested()) throw ExperimentInterrupted("interrupted during " + spec.id);
  }
  if (progress.log && progress.terminal) std::fprintf(progress.log, "\r\033[K");
  if (r.status != "diverged") evaluate();
  if (!dir.empty() && !metrics.flush()) throw std::runtime_error("writing " + dir + "/metrics.jsonl failed (disk full?)");

  r.skipped_steps = trainer.amp().scaler().skipped_steps();
  r.final_loss_scale = trainer.amp().scaler().scale();
  double sum = 0;
  int n = 0;
  for (double v : recent)
    if (std::isfinite(v)) {
      sum += v;
      ++n;
    }
  r.final_train_loss = n == static_cast<int>(recent.size()) && n ? sum / n : report::kNaN;
  if (timed_steps) {
    r.step_ms = 1e3 * timed_s / static_cast<double>(timed_steps);
    r.tokens_per_s = static_cast<double>(timed_tokens) / timed_s;
  }
  if (session->model->task() == nn::Model::Task::classifier && r.status == "ok")
    r.accuracy = classifier_accuracy(*session->model, *session->val);
  r.peak_memory_bytes = static_cast<double>(memory_stats().peak_total);
  if (nn::is_task(spec.task, nn::Task::language_model) && spec.recipe == "fp32" && r.status == "ok")
    r.grad_exponents.push_back(gradient_exponents(*session));
  r.seconds = since(t0);
  times.cpu = cpu_seconds() - cpu0;
  if (progress.times) *progress.times = times;
  return r;
}

}  // namespace mantissa::study
