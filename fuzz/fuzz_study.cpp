// A study's runs/<id>/result.json from outside (`experiment --resume` reads
// every finished run's): parsed, then drawn into the report with the study's
// tables and figures (curves of any values, axes over any range).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "mantissa/report/report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mantissa;
  const std::string text(reinterpret_cast<const char*>(data), size);
  FUZZ_EXPECT_REFUSAL({
    report::ReportInput input;
    input.runs.push_back(report::run_result_from_json(text));
    // The same run as its own fp32 baseline too, so the gap columns are drawn.
    report::RunResult base = input.runs.back();
    base.recipe = "fp32";
    base.id += "-fp32";
    input.runs.push_back(base);
    (void)report::write_report((fuzz::scratch() / "report").string(), input);
  });
  return 0;
}
