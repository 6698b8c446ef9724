// The FP4 ablation section: gap to bf16-amp per recipe and per ingredient.
#include "report_fp4.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "report_task.hpp"

namespace mantissa::report {
namespace {

// What a run's recipe name says it is.
std::string what(const std::string& recipe) {
  if (recipe == "nvfp4") return "NVIDIA's recipe: all fixes";
  if (recipe == "nvfp4/rht=none") return "nvfp4 without the random Hadamard transform";
  if (recipe == "nvfp4/rht=deterministic") return "nvfp4 with a deterministic Hadamard instead of a random one";
  if (recipe == "nvfp4/fp4_sr=none") return "nvfp4 without stochastic rounding";
  if (recipe == "nvfp4/fp4_weight_2d=false") return "nvfp4 with 1-D weight blocks";
  if (recipe == "nvfp4/bf16_layers=none") return "nvfp4 without bf16 layers";
  if (recipe == "nvfp4/fp4_until=0.9") return "nvfp4, bf16 for the last 10% of steps";
  if (recipe == "nvfp4-naive") return "NVFP4 without any fix";
  if (recipe == "mxfp4") return "Tseng et al.: MXFP4 backward, SR, RHT, bf16 forward";
  if (recipe == "mxfp4-fwd") return "mxfp4 with the forward in MXFP4 too";
  if (recipe == "mxfp4-naive") return "MXFP4 without any fix";
  return "reference";
}

bool is_fp4(const std::string& r) { return r.rfind("nvfp4", 0) == 0 || r.rfind("mxfp4", 0) == 0; }

}  // namespace

std::string fp4_section_md(const std::vector<RunResult>& runs) {
  const std::vector<RecipeSummary> rows = summarize(runs, "bf16-amp");
  const std::string& lm = task_id(nn::Task::language_model);  // the ablation trains the language model
  bool fp4 = false, ref = false;
  for (const auto& s : rows) {
    fp4 = fp4 || (s.task == lm && is_fp4(s.recipe));
    ref = ref || (s.task == lm && s.recipe == "bf16-amp" && s.finished > 0);
  }
  if (!fp4 || !ref) return "";
  std::ostringstream o;
  o << "### 4-bit recipes: gap to bf16-amp per ingredient\n\n"
    << "| recipe | what it is | val bpc | gap to bf16-amp | diverged | step time (ms) |\n|---|---|---|---|---|---|\n";
  char buf[256];
  for (const auto& s : rows) {
    if (s.task != lm) continue;
    if (s.finished == 0) {
      o << "| " << s.recipe << " | " << what(s.recipe) << " | not run | | | |\n";
      continue;
    }
    std::snprintf(buf, sizeof buf, "| %s | %s | %.3f | %+.2f %% | %d | %.1f |\n", s.recipe.c_str(),
                  what(s.recipe).c_str(), s.metric.mean, std::isfinite(s.gap_pct) ? s.gap_pct : NAN, s.diverged,
                  s.step_ms);
    o << buf;
  }
  o << "\nThe nvfp4 rows with a setting after the slash remove one ingredient of the recipe; their gap minus "
       "nvfp4's is what that ingredient buys at this budget.\n\n";
  return o.str();
}

}  // namespace mantissa::report
