// The inspector section of the study report: for each recipe that diverged
// or fell behind fp32, its worst cast sites and the inspector's figures.
#pragma once

#include <functional>
#include <string>

#include "mantissa/report/report.hpp"

namespace mantissa::report {

// Markdown for in.inspections (or in.inspection_note; "" when both are
// empty). add_figure(name, svg) stores a figure and returns its relative path.
std::string inspector_section_md(const ReportInput& in,
                                 const std::function<std::string(const std::string&, const std::string&)>& add_figure);

}  // namespace mantissa::report
