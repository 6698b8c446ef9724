// The FP4 ablation table of the study report (--preset fp4).
#pragma once

#include <string>
#include <vector>

#include "mantissa/report/report.hpp"

namespace mantissa::report {

// "" unless the runs hold nvfp4 or mxfp4 recipes and bf16-amp: then a
// markdown section with each 4-bit run's val bpc and its gap to bf16-amp,
// the nvfp4 variants named by the ingredient they remove.
std::string fp4_section_md(const std::vector<RunResult>& runs);

}  // namespace mantissa::report
