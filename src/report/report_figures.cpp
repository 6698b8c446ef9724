// The study's figures, built from run results with the SVG plot writer:
// validation curves, the gradient-exponent histogram against the FP16 and
// FP8 ranges, and the loss scale over time.
#include "report_figures.hpp"

#include <cmath>
#include <map>

#include "mantissa/formats/format.hpp"
#include "report_task.hpp"

namespace mantissa::report {

namespace {

// Pointwise mean over seeds of the curves of one recipe (steps are shared:
// every seed evaluates at the same steps); values above `cap` are dropped so
// one diverged recipe does not flatten every other line.
Series mean_curve(const std::vector<const RunResult*>& seeds, double cap) {
  std::map<int64_t, std::pair<double, int>> acc;
  for (const RunResult* r : seeds)
    for (const CurvePoint& p : r->val_curve) {
      auto& a = acc[p.step];
      if (std::isfinite(p.value) && p.value <= cap) {
        a.first += p.value;
        ++a.second;
      }
    }
  Series s;
  s.name = seeds.front()->recipe;
  for (const auto& [step, a] : acc) {
    s.x.push_back(static_cast<double>(step));
    s.y.push_back(a.second ? a.first / a.second : kNaN);
  }
  return s;
}

std::vector<std::pair<std::string, std::vector<const RunResult*>>> by_recipe(const std::vector<RunResult>& runs,
                                                                               const std::string& task) {
  std::vector<std::pair<std::string, std::vector<const RunResult*>>> out;
  for (const auto& r : runs) {
    if (r.task != task || (r.status != "ok" && r.status != "diverged")) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == r.recipe; });
    if (it == out.end()) out.push_back({r.recipe, {&r}});
    else it->second.push_back(&r);
  }
  return out;
}

}  // namespace

std::optional<LinePlot> validation_curves(const std::vector<RunResult>& runs, const std::string& task) {
  LinePlot p;
  const nn::TaskInfo& info = nn::task_info(task);
  p.title = info.curve_title + " (mean over seeds)";
  p.x.label = "optimizer step";
  p.y.label = info.curve_label;
  const double cap = divergence_threshold(runs, task);
  for (const auto& [recipe, seeds] : by_recipe(runs, task)) {
    Series s = mean_curve(seeds, cap);
    s.markers = s.x.size() <= 12;
    s.dashed = recipe.rfind("unit-", 0) == 0;  // unit-scaled recipes dashed
    bool any = false;
    for (double v : s.y) any = any || std::isfinite(v);
    if (any) p.series.push_back(std::move(s));
  }
  if (p.series.empty()) return std::nullopt;
  return p;
}

std::optional<HistogramPlot> gradient_exponent_plot(const std::vector<RunResult>& runs) {
  const ExponentCounts* e = nullptr;
  for (const auto& r : runs)
    if (!r.grad_exponents.empty()) {
      e = &r.grad_exponents.front();
      break;
    }
  if (!e || e->counts.empty()) return std::nullopt;
  int64_t total = e->zeros + e->nonfinite;
  for (int64_t c : e->counts) total += c;
  if (total == 0) return std::nullopt;
  HistogramPlot p;
  p.title = "Gradient exponents of the standard model vs the FP16 and FP8 ranges";
  p.x.label = "log2 |gradient| (bins of one binade)";
  p.y.label = "share of values (%)";
  Histogram h;
  h.name = "gradients (" + fmt_fixed(100.0 * static_cast<double>(e->zeros) / static_cast<double>(total), 2) + " % zero)";
  for (size_t i = 0; i <= e->counts.size(); ++i) h.edges.push_back(e->lo + static_cast<double>(i));
  for (int64_t c : e->counts) h.counts.push_back(100.0 * static_cast<double>(c) / static_cast<double>(total));
  p.series.push_back(std::move(h));
  for (const char* name : {"fp16", "e5m2", "e4m3fn"}) {
    const formats::Format& f = formats::preset(name);
    const std::string label = std::string(name == std::string("fp16") ? "FP16" : name == std::string("e5m2") ? "FP8 E5M2" : "FP8 E4M3") +
                              " (incl. subnormals)";
    p.bands.push_back(format_band(label, f.min_subnormal(), f.max()));
  }
  return p;
}

std::optional<LinePlot> loss_scale_plot(const std::vector<RunResult>& runs) {
  LinePlot p;
  p.title = "Loss scale over training (dynamic loss scaling)";
  p.x.label = "optimizer step";
  p.y.label = "loss scale";
  p.y.log2 = true;
  for (const auto& [recipe, seeds] : by_recipe(runs, task_id(nn::Task::language_model))) {
    const RunResult& r = *seeds.front();  // first seed: a scale trace is not averaged
    bool varies = false;
    for (const auto& c : r.loss_scale_curve) varies = varies || c.value != r.loss_scale_curve.front().value;
    if (r.loss_scale_curve.empty() || (!varies && r.loss_scale_curve.front().value == 1.0)) continue;
    Series s;
    s.name = recipe + " (seed " + std::to_string(r.seed) + ")";
    s.markers = false;
    for (const auto& c : r.loss_scale_curve) {
      s.x.push_back(static_cast<double>(c.step));
      s.y.push_back(c.value);
    }
    p.series.push_back(std::move(s));
  }
  if (p.series.empty()) return std::nullopt;
  return p;
}

namespace {

// One curve as a line: x = log2 lr, y = the mean metric; a rate where some
// seed diverged has no comparable mean and leaves a gap. False when nothing is finite.
bool sweep_series(const SweepCurve& c, Series& s) {
  bool any = false;
  for (const SweepPoint& q : c.points) {
    s.x.push_back(std::log2(q.lr));
    const bool ok = q.finished > 0 && q.diverged == 0 && q.metric.n > 0;
    s.y.push_back(ok ? q.metric.mean : kNaN);
    any = any || ok;
  }
  return any;
}

LinePlot sweep_axes(const std::string& task, const std::string& title) {
  LinePlot p;
  p.title = title;
  p.x.label = "log2 learning rate";
  const nn::TaskInfo& info = nn::task_info(task);
  p.y.label = info.metric_label + (info.metric_unit.empty() ? "" : " (" + info.metric_unit + ")");
  return p;
}

}  // namespace

std::optional<LinePlot> sweep_plot(const std::vector<SweepCurve>& curves, const std::string& task) {
  LinePlot p = sweep_axes(task, "Learning-rate sweep: " + nn::task_info(task).sweep_title + " (mean over seeds)");
  for (const SweepCurve& c : curves) {
    if (c.task != task || c.points.size() < 2) continue;
    Series s;
    s.name = c.recipe;
    s.dashed = c.recipe.rfind("unit-", 0) == 0 || c.recipe.rfind("umup-", 0) == 0;
    if (sweep_series(c, s)) p.series.push_back(std::move(s));
  }
  if (p.series.empty()) return std::nullopt;
  return p;
}

std::optional<LinePlot> transfer_plot(const std::vector<SweepCurve>& curves, const std::string& task,
                                      const std::string& recipe) {
  LinePlot p = sweep_axes(task, recipe + ": " + nn::task_info(task).metric_short +
                                    " against learning rate, one line per width (mean over seeds)");
  for (const SweepCurve& c : curves) {
    if (c.task != task || c.recipe != recipe || c.points.size() < 2) continue;
    Series s;
    s.name = "d_model " + std::to_string(c.d_model);
    if (sweep_series(c, s)) p.series.push_back(std::move(s));
  }
  if (p.series.empty()) return std::nullopt;
  return p;
}

}  // namespace mantissa::report
