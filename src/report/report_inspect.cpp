// The inspector section: one table of ranked cast sites per inspected
// recipe, with the heat map, fraction and cosine figures copied into the
// report's figures/ folder (so report.html inlines them).
#include "report_inspect.hpp"

#include <cmath>
#include <sstream>

namespace mantissa::report {

namespace {

std::string db(double v) {
  if (std::isinf(v)) return v > 0 ? "exact" : "-inf";
  return fmt_fixed(v, 1);
}
std::string pct(double v) { return fmt_fixed(100.0 * v, 1) + " %"; }
std::string cell(std::string s) {
  for (char& c : s)
    if (c == '|' || c == '\n') c = ' ';
  return s;
}
std::string caption(const std::string& file, const std::string& recipe) {
  if (file == "sqnr_heatmap.svg") return "SQNR per cast site and step (sites x steps), " + recipe;
  if (file == "fractions.svg") return "Underflow and saturation fractions over the inspected steps, " + recipe;
  if (file == "grad_cosine.svg") return "Gradient and update cosine to the fp32 shadow per parameter, " + recipe;
  return file + ", " + recipe;
}

}  // namespace

std::string inspector_section_md(const ReportInput& in,
                                 const std::function<std::string(const std::string&, const std::string&)>& add_figure) {
  if (in.inspections.empty() && in.inspection_note.empty()) return {};
  std::ostringstream o;
  o << "## Inspector: where the recipes that fell behind lose precision\n\n";
  if (in.inspections.empty()) {
    o << in.inspection_note << "\n\n";
    return o.str();
  }
  o << "Each recipe below diverged or fell behind fp32 by more than the threshold; `mantissa inspect` retrained it "
       "for a few steps with the study's model and data beside an fp32 shadow re-synchronised every step. Sites are "
       "ranked by the share of their values or signal lost (the largest of underflow, saturation and 10^(-SQNR/10)); "
       "SQNR is the median over the inspected steps.\n\n";
  if (!in.inspection_note.empty()) o << in.inspection_note << "\n\n";
  for (const InspectorSection& s : in.inspections) {
    o << "### " << s.recipe << " (" << s.reason << ")\n\n";
    if (!s.note.empty()) {
      o << "Not inspected: " << s.note << "\n\n";
      continue;
    }
    o << s.steps << " inspected steps; all files in `" << s.dir << "/`.\n\n";
    o << "| rank | site | kind | format | lost | SQNR dB (median) | SQNR dB (min) | underflow | saturated | scale log2 | cause |\n"
         "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|\n";
    int rank = 0;
    for (const auto& t : s.top)
      o << "| " << ++rank << " | " << cell(t.site) << " | " << t.kind << " | " << t.format << " | " << pct(t.lost) << " | "
        << db(t.sqnr_db) << " | " << db(t.min_sqnr_db) << " | " << pct(t.underflow) << " | " << pct(t.saturation)
        << " | " << t.scale_log2 << " | " << cell(t.cause) << " |\n";
    o << "\n";
    for (const auto& [file, svg] : s.figures)
      o << "![" << caption(file, s.recipe) << "](" << add_figure("inspect-" + s.recipe + "-" + file, svg) << ")\n\n";
  }
  return o.str();
}

}  // namespace mantissa::report
