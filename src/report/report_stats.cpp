// Run results <-> JSON, and the per-recipe statistics of the report's tables.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mantissa/io/untrusted.hpp"
#include "mantissa/report/report.hpp"
#include "report_task.hpp"

namespace mantissa::report {

using nlohmann::json;

namespace {

// JSON has no NaN/inf: they are stored as null and read back as NaN.
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
double get_num(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return kNaN;
  return j[key].get<double>();
}

json curve_json(const std::vector<CurvePoint>& c) {
  json a = json::array();
  for (const auto& p : c) a.push_back(json::array({p.step, num(p.value)}));
  return a;
}
std::vector<CurvePoint> curve_from(const json& j, const char* key) {
  std::vector<CurvePoint> c;
  if (!j.contains(key)) return c;
  for (const auto& p : j[key])
    c.push_back({io::as_integer(p.at(0), std::string("run result: a step of '") + key + "'"),
                 p.at(1).is_null() ? kNaN : p.at(1).get<double>()});
  return c;
}

}  // namespace

std::string to_json(const RunResult& r) {
  json j = {{"id", r.id},
            {"task", r.task},
            {"recipe", r.recipe},
            {"seed", r.seed},
            {"status", r.status},
            {"error", r.error},
            {"parametrisation", r.parametrisation},
            {"lr", num(r.lr)},
            {"d_model", r.d_model},
            {"steps", r.steps},
            {"steps_planned", r.steps_planned},
            {"tokens", r.tokens},
            {"diverged_at", r.diverged_at},
            {"skipped_steps", r.skipped_steps},
            {"final_train_loss", num(r.final_train_loss)},
            {"val_loss", num(r.val_loss)},
            {"val_bpc", num(r.val_bpc)},
            {"divergence_threshold", num(r.divergence_threshold)},
            {"accuracy", num(r.accuracy)},
            {"final_loss_scale", num(r.final_loss_scale)},
            {"step_ms", num(r.step_ms)},
            {"tokens_per_s", num(r.tokens_per_s)},
            {"peak_memory_bytes", r.peak_memory_bytes},
            {"seconds", r.seconds},
            {"val_curve", curve_json(r.val_curve)},
            {"loss_scale_curve", curve_json(r.loss_scale_curve)}};
  json g = json::array();
  for (const auto& e : r.grad_exponents)
    g.push_back({{"what", e.what}, {"lo", e.lo}, {"counts", e.counts}, {"zeros", e.zeros}, {"nonfinite", e.nonfinite}});
  j["grad_exponents"] = g;
  return j.dump(1);
}

RunResult run_result_from_json(const std::string& text) {
  RunResult r;
  try {
    const json j = io::parse_json(text, "run result");
    r.id = j.at("id").get<std::string>();
    r.task = j.at("task").get<std::string>();
    r.recipe = j.at("recipe").get<std::string>();
    const std::string what = "run result";
    r.seed = io::as_integer(j.at("seed"), what + ": 'seed'");
    r.status = j.at("status").get<std::string>();
    r.error = j.value("error", "");
    r.parametrisation = j.value("parametrisation", "standard");
    r.lr = get_num(j, "lr");
    r.d_model = io::integer_or(j, "d_model", 0, what);
    r.steps = io::integer_or(j, "steps", 0, what);
    r.steps_planned = io::integer_or(j, "steps_planned", 0, what);
    r.tokens = io::integer_or(j, "tokens", 0, what);
    r.diverged_at = io::integer_or(j, "diverged_at", 0, what);
    r.skipped_steps = io::integer_or(j, "skipped_steps", 0, what);
    r.final_train_loss = get_num(j, "final_train_loss");
    r.val_loss = get_num(j, "val_loss");
    r.val_bpc = get_num(j, "val_bpc");
    r.divergence_threshold = get_num(j, "divergence_threshold");
    r.accuracy = get_num(j, "accuracy");
    r.final_loss_scale = get_num(j, "final_loss_scale");
    r.step_ms = get_num(j, "step_ms");
    r.tokens_per_s = get_num(j, "tokens_per_s");
    r.peak_memory_bytes = j.value("peak_memory_bytes", 0.0);
    r.seconds = j.value("seconds", 0.0);
    r.val_curve = curve_from(j, "val_curve");
    r.loss_scale_curve = curve_from(j, "loss_scale_curve");
    if (j.contains("grad_exponents"))
      for (const auto& g : j["grad_exponents"]) {
        const int64_t lo = io::as_integer(g.at("lo"), what + ": grad_exponents 'lo'");
        if (lo < -1100 || lo > 1100) throw std::invalid_argument(what + ": grad_exponents 'lo' is outside [-1100, 1100]");
        std::vector<int64_t> counts;
        for (const auto& n : g.at("counts")) counts.push_back(io::as_integer(n, what + ": grad_exponents 'counts'"));
        r.grad_exponents.push_back({io::string_or_empty(g, "what"), static_cast<int>(lo), std::move(counts),
                                    io::integer_or(g, "zeros", 0, what), io::integer_or(g, "nonfinite", 0, what)});
      }
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("run result: ") + e.what());
  }
  return r;
}

MeanStd mean_std(const std::vector<double>& values) {
  MeanStd m;
  double sum = 0;
  for (double v : values)
    if (std::isfinite(v)) {
      sum += v;
      ++m.n;
    }
  if (m.n == 0) return m;
  m.mean = sum / m.n;
  if (m.n < 2) return m;
  double ss = 0;
  for (double v : values)
    if (std::isfinite(v)) ss += (v - m.mean) * (v - m.mean);
  m.std = std::sqrt(ss / (m.n - 1));
  return m;
}

double divergence_threshold(const std::string& task) { return nn::task_info(task).divergence_threshold; }

double divergence_threshold(const RunResult& r) {
  return std::isfinite(r.divergence_threshold) ? r.divergence_threshold : divergence_threshold(r.task);
}

double divergence_threshold(const std::vector<RunResult>& runs, const std::string& task) {
  double t = divergence_threshold(task);
  if (std::isfinite(t)) return t;
  for (const RunResult& r : runs)
    if (r.task == task && std::isfinite(r.divergence_threshold))
      t = std::isfinite(t) ? std::max(t, r.divergence_threshold) : r.divergence_threshold;
  return t;
}

bool is_diverged(const RunResult& r, double threshold) {
  if (r.status == "diverged") return true;
  if (r.status != "ok") return false;
  const double metric = accuracy_task(r.task) ? r.val_loss : r.val_bpc;
  return !std::isfinite(metric) || metric > threshold;
}

// A run that finished but learnt nothing (metric non-finite or past the threshold) diverged at
// the first validation point that was; the trainer only records a step when it stopped itself.
static int64_t divergence_step(const RunResult& r, double threshold) {
  if (r.diverged_at > 0) return r.diverged_at;
  for (const auto& p : r.val_curve)
    if (!std::isfinite(p.value) || p.value > threshold) return p.step;
  return 0;
}

std::vector<RecipeSummary> summarize(const std::vector<RunResult>& runs, const std::string& reference) {
  std::vector<RecipeSummary> rows;
  auto find = [&](const std::string& task, const std::string& recipe) -> RecipeSummary* {
    for (auto& s : rows)
      if (s.task == task && s.recipe == recipe) return &s;
    return nullptr;
  };
  for (const auto& r : runs)
    if (!find(r.task, r.recipe)) {
      RecipeSummary s;
      s.task = r.task;
      s.recipe = r.recipe;
      rows.push_back(s);
    }

  for (auto& s : rows) {
    std::vector<double> metric, train_loss, skipped, step_ms, tps, accuracy;
    std::string first_error, first_bad_status;
    for (const auto& r : runs) {
      if (r.task != s.task || r.recipe != s.recipe) continue;
      ++s.runs;
      if (r.status != "ok" && r.status != "diverged") {
        if (first_bad_status.empty()) first_bad_status = r.status;
        if (first_error.empty()) first_error = r.error;
        continue;
      }
      ++s.finished;
      skipped.push_back(static_cast<double>(r.skipped_steps));
      step_ms.push_back(r.step_ms);
      tps.push_back(r.tokens_per_s);
      if (r.peak_memory_bytes > 0)
        s.peak_memory_bytes = std::isfinite(s.peak_memory_bytes) ? std::max(s.peak_memory_bytes, r.peak_memory_bytes)
                                                                 : r.peak_memory_bytes;
      if (is_diverged(r, divergence_threshold(r))) {
        ++s.diverged;
        const int64_t at = divergence_step(r, divergence_threshold(r));
        if (at > 0 && (s.first_diverged_at == 0 || at < s.first_diverged_at)) s.first_diverged_at = at;
        continue;
      }
      metric.push_back(metric_of(r));
      if (nn::is_task(s.task, nn::Task::masked_language_model)) accuracy.push_back(100.0 * r.accuracy);
      train_loss.push_back(r.final_train_loss);
    }
    s.status = s.finished > 0 ? "ok" : first_bad_status;
    s.note = first_error;
    s.metric = mean_std(metric);
    s.train_loss = mean_std(train_loss);
    s.masked_accuracy = mean_std(accuracy);
    s.skipped_steps = mean_std(skipped).mean;
    s.step_ms = mean_std(step_ms).mean;
    s.tokens_per_s = mean_std(tps).mean;
  }
  for (auto& s : rows) {
    const RecipeSummary* ref = find(s.task, reference);
    if (!ref || !std::isfinite(ref->metric.mean) || !std::isfinite(s.metric.mean)) continue;
    s.gap_pct = gap_of(s.task, s.metric.mean, ref->metric.mean);
  }
  return rows;
}

std::string fmt_fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "—";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace mantissa::report
