// The analysis figure from recorded statistics: per-op forward and backward
// scale of one or more models (e.g. standard vs unit-scaled GPT at init).
#pragma once

#include <string>
#include <vector>

#include "mantissa/report/svg.hpp"
#include "mantissa/unit/stats.hpp"

namespace mantissa::report {

enum class ScaleStatistic { rms, std, mean_abs, max_abs };
const char* statistic_name(ScaleStatistic s);

struct RecordedModel {
  std::string name;  // "standard", "unit"
  const unit::ScaleRecorder* recorder = nullptr;
};

// Ops on x: the first model's ops in model order, then ops only later models
// have. Per model two series: "<name> forward" (solid) and "<name> backward"
// (dashed); the first row of each (op, pass) gives the value, NaN where a
// model lacks the op or pass.
LinePlot scale_plot(const std::vector<RecordedModel>& models, std::string title,
                    ScaleStatistic statistic = ScaleStatistic::rms);

}  // namespace mantissa::report
