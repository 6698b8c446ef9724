// Internal: the figures of the recipe study's report (report_figures.cpp).
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "mantissa/report/report.hpp"
#include "mantissa/report/svg.hpp"

namespace mantissa::report {

// One line per recipe of the task; nullopt when no run has a curve.
std::optional<LinePlot> validation_curves(const std::vector<RunResult>& runs, const std::string& task);
// The first run's stored gradient exponents with the FP16 / E5M2 / E4M3 ranges.
std::optional<HistogramPlot> gradient_exponent_plot(const std::vector<RunResult>& runs);
// GPT recipes whose loss scale is not constantly 1.
std::optional<LinePlot> loss_scale_plot(const std::vector<RunResult>& runs);

// Learning rate (log2) against the final metric, one line per recipe of the
// task (unit-scaled ones dashed); nullopt when no recipe was swept.
std::optional<LinePlot> sweep_plot(const std::vector<SweepCurve>& curves, const std::string& task);

// A width study: one recipe's curves, one line per d_model.
std::optional<LinePlot> transfer_plot(const std::vector<SweepCurve>& curves, const std::string& task,
                                      const std::string& recipe);

// "mean ± std" (just the mean for one value, "—" for none).
std::string mean_pm(const MeanStd& m, int decimals);

// Markdown subset of the report -> HTML, with ![..](figures/x.svg) images
// replaced by the SVG text from `svgs` (keyed by that path).
std::string markdown_to_html(const std::string& md, const std::string& title,
                             const std::vector<std::pair<std::string, std::string>>& svgs);

}  // namespace mantissa::report
