// Learning-rate sweeps in the study's report: per (task, recipe) the metric at
// every rate, the best rate, the gap to the reference at its own best rate,
// and the tables.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "mantissa/report/report.hpp"
#include "report_figures.hpp"
#include "report_task.hpp"

namespace mantissa::report {

namespace {

bool same_curve(const SweepCurve& c, const RunResult& r) {
  return c.task == r.task && c.recipe == r.recipe && c.d_model == r.d_model;
}

bool finished(const RunResult& r) { return r.status == "ok" || r.status == "diverged"; }

// Every seed at this rate finished and none diverged.
bool usable(const SweepPoint& p) { return p.runs > 0 && p.finished == p.runs && p.diverged == 0 && p.metric.n == p.runs; }

}  // namespace

std::string lr_label(double lr) {
  if (!(lr > 0) || !std::isfinite(lr)) return fmt_fixed(lr, 3);
  int e = 0;
  if (std::frexp(lr, &e) == 0.5) return "2^" + std::to_string(e - 1);
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {  // the shortest form that reads back as lr
    std::snprintf(buf, sizeof buf, "%.*g", digits, lr);
    if (std::strtod(buf, nullptr) == lr) break;
  }
  return buf;
}

std::vector<SweepCurve> lr_sweep(const std::vector<RunResult>& runs, const std::string& reference) {
  std::vector<SweepCurve> curves;
  for (const RunResult& r : runs) {
    if (r.status == "not-available" || std::isnan(r.lr)) continue;
    auto c = std::find_if(curves.begin(), curves.end(), [&](const SweepCurve& s) { return same_curve(s, r); });
    if (c == curves.end()) {
      curves.push_back({r.task, r.recipe, r.d_model, {}, kNaN, {}, false, kNaN});
      c = curves.end() - 1;
    }
    auto p = std::find_if(c->points.begin(), c->points.end(), [&](const SweepPoint& q) { return q.lr == r.lr; });
    if (p == c->points.end()) {
      c->points.push_back({r.lr, 0, 0, 0, {}});
      p = c->points.end() - 1;
    }
    ++p->runs;
  }
  // Metrics per point: the finished, non-diverged seeds.
  for (SweepCurve& c : curves) {
    std::sort(c.points.begin(), c.points.end(), [](const SweepPoint& a, const SweepPoint& b) { return a.lr < b.lr; });
    for (SweepPoint& p : c.points) {
      std::vector<double> values;
      for (const RunResult& r : runs) {
        if (!same_curve(c, r) || r.lr != p.lr || !finished(r)) continue;
        ++p.finished;
        if (is_diverged(r, divergence_threshold(r))) ++p.diverged;
        else values.push_back(metric_of(r));
      }
      p.metric = mean_std(values);
    }
    const bool lower = nn::task_info(c.task).lower_is_better;
    for (size_t i = 0; i < c.points.size(); ++i) {
      const SweepPoint& p = c.points[i];
      if (!usable(p)) continue;
      if (std::isnan(c.best_lr) || (lower ? p.metric.mean < c.best.mean : p.metric.mean > c.best.mean)) {
        c.best_lr = p.lr;
        c.best = p.metric;
        c.best_at_edge = c.points.size() > 1 && (i == 0 || i + 1 == c.points.size());
      }
    }
  }
  for (SweepCurve& c : curves) {
    auto ref = std::find_if(curves.begin(), curves.end(), [&](const SweepCurve& s) {
      return s.task == c.task && s.recipe == reference && s.d_model == c.d_model;
    });
    if (ref == curves.end() || std::isnan(ref->best_lr) || std::isnan(c.best_lr)) continue;
    c.gap_pct = gap_of(c.task, c.best.mean, ref->best.mean);
  }
  return curves;
}

bool is_sweep(const std::vector<SweepCurve>& curves) {
  for (const SweepCurve& c : curves)
    if (c.points.size() > 1) return true;
  return false;
}

std::vector<RunResult> at_best_rate(const std::vector<RunResult>& runs, const std::vector<SweepCurve>& curves) {
  std::vector<RunResult> out;
  for (const RunResult& r : runs) {
    auto c = std::find_if(curves.begin(), curves.end(), [&](const SweepCurve& s) { return same_curve(s, r); });
    if (c == curves.end() || std::isnan(c->best_lr) || r.lr == c->best_lr) out.push_back(r);
  }
  return out;
}

std::vector<int64_t> sweep_widths(const std::vector<SweepCurve>& curves, const std::string& task) {
  std::set<int64_t> w;
  for (const SweepCurve& c : curves)
    if (c.task == task) w.insert(c.d_model);
  return {w.begin(), w.end()};
}

std::string sweep_table_md(const std::vector<SweepCurve>& curves, const std::string& task) {
  const nn::TaskInfo& info = nn::task_info(task);
  const bool points = accuracy_task(task);  // the gap in accuracy points, else in %
  const int decimals = info.metric_decimals;
  const bool widths = sweep_widths(curves, task).size() > 1;
  std::set<double> rates;
  for (const SweepCurve& c : curves)
    if (c.task == task)
      for (const SweepPoint& p : c.points) rates.insert(p.lr);
  if (rates.empty()) return {};
  std::ostringstream o;
  o << "| recipe |" << (widths ? " d_model |" : "") << " best lr | " << info.metric_short
    << (info.metric_unit.empty() ? "" : " " + info.metric_unit)
    << " at best lr (mean ± std) | gap to fp32 at fp32's best lr |";
  for (double lr : rates) o << " " << lr_label(lr) << " |";
  o << "\n|---|---|---|---|" << (widths ? "---|" : "");
  for (size_t i = 0; i < rates.size(); ++i) o << "---|";
  o << "\n";
  // Rows by recipe (first appearance), then width.
  std::vector<const SweepCurve*> rows;
  for (const SweepCurve& c : curves)
    if (c.task == task) rows.push_back(&c);
  std::vector<std::string> order;
  for (const SweepCurve* c : rows)
    if (std::find(order.begin(), order.end(), c->recipe) == order.end()) order.push_back(c->recipe);
  std::stable_sort(rows.begin(), rows.end(), [&](const SweepCurve* a, const SweepCurve* b) {
    const auto ia = std::find(order.begin(), order.end(), a->recipe), ib = std::find(order.begin(), order.end(), b->recipe);
    return ia != ib ? ia < ib : a->d_model < b->d_model;
  });
  for (const SweepCurve* cp : rows) {
    const SweepCurve& c = *cp;
    o << "| " << c.recipe << " | ";
    if (widths) o << c.d_model << " | ";
    if (std::isnan(c.best_lr)) o << "none (every rate diverged or failed) | — | — |";
    else {
      char gap[48] = "—";
      if (std::isfinite(c.gap_pct)) std::snprintf(gap, sizeof gap, points ? "%+.2f" : "%+.2f %%", c.gap_pct);
      o << lr_label(c.best_lr) << (c.best_at_edge ? " (edge of the sweep)" : "") << " | " << mean_pm(c.best, decimals)
        << " | " << gap << " |";
    }
    for (double lr : rates) {
      auto p = std::find_if(c.points.begin(), c.points.end(), [&](const SweepPoint& q) { return q.lr == lr; });
      if (p == c.points.end()) o << " not run |";
      else if (p->finished == 0) o << " failed |";
      else if (p->diverged == p->finished) o << " diverged |";
      else {
        o << " " << fmt_fixed(p->metric.mean, decimals);
        if (p->diverged > 0) o << " (" << p->diverged << " diverged)";
        o << " |";
      }
    }
    o << "\n";
  }
  return o.str();
}

}  // namespace mantissa::report
