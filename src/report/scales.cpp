#include "mantissa/report/scales.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace mantissa::report {

const char* statistic_name(ScaleStatistic s) {
  switch (s) {
    case ScaleStatistic::rms: return "RMS";
    case ScaleStatistic::std: return "std";
    case ScaleStatistic::mean_abs: return "mean |x|";
    case ScaleStatistic::max_abs: return "max |x|";
  }
  return "?";
}

namespace {
double pick(const unit::TensorStats& t, ScaleStatistic s) {
  switch (s) {
    case ScaleStatistic::rms: return t.rms;
    case ScaleStatistic::std: return t.std;
    case ScaleStatistic::mean_abs: return t.mean_abs;
    case ScaleStatistic::max_abs: return t.max_abs;
  }
  return t.rms;
}
}  // namespace

LinePlot scale_plot(const std::vector<RecordedModel>& models, std::string title, ScaleStatistic statistic) {
  if (models.empty()) throw std::invalid_argument("scale plot '" + title + "': no models");
  std::vector<std::vector<unit::ScaleRow>> ordered;
  std::vector<std::string> ops;
  for (const RecordedModel& m : models) {
    if (!m.recorder) throw std::invalid_argument("scale plot '" + title + "': model '" + m.name + "' has no recorder");
    ordered.push_back(m.recorder->model_order());
    for (const unit::ScaleRow& r : ordered.back())
      if (std::find(ops.begin(), ops.end(), r.op) == ops.end()) ops.push_back(r.op);
  }
  std::vector<ScaleSeries> series;
  for (size_t k = 0; k < models.size(); ++k)
    for (unit::Pass pass : {unit::Pass::forward, unit::Pass::backward}) {
      ScaleSeries s{models[k].name + " " + unit::pass_name(pass),
                    std::vector<double>(ops.size(), std::numeric_limits<double>::quiet_NaN()), pass == unit::Pass::backward};
      bool any = false;
      for (size_t i = 0; i < ops.size(); ++i)
        for (const unit::ScaleRow& r : ordered[k])
          if (r.op == ops[i] && r.pass == pass) {
            s.values[i] = pick(r.stats, statistic);
            any = true;
            break;
          }
      if (any) series.push_back(std::move(s));
    }
  return scale_plot(ops, series, std::move(title), statistic_name(statistic));
}

}  // namespace mantissa::report
