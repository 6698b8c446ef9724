#include "mantissa/amp/grad_stats.hpp"

#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>

namespace mantissa::amp {

void GradRangeCounts::add(const GradRangeCounts& o) {
  total += o.total;
  zero += o.zero;
  flushed += o.flushed;
  subnormal += o.subnormal;
  overflow += o.overflow;
}

std::string grad_group_name(const std::string& name) {
  std::string s = name;
  const std::string prefix = "transformer.";
  if (s.rfind(prefix, 0) == 0) s = s.substr(prefix.size());
  // Drop "h.<digits>." (GPT blocks) so that a group spans all layers.
  if (s.size() > 2 && s[0] == 'h' && s[1] == '.') {
    size_t i = 2;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i > 2 && i < s.size() && s[i] == '.') s = s.substr(i + 1);
  }
  return s;
}

GradRangeCounts classify(const formats::Format& f, const float* g, int64_t n) {
  // Thresholds in double so that formats wider than fp32's range classify right.
  const double min_sub = f.min_subnormal(), min_norm = f.min_normal(), max = f.max();
  int64_t zero = 0, flushed = 0, subnormal = 0, overflow = 0;
#pragma omp parallel for reduction(+ : zero, flushed, subnormal, overflow) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(g[i]));
    if (a == 0) ++zero;
    else if (!(a <= max)) ++overflow;  // also counts inf and NaN
    else if (a < min_sub) ++flushed;
    else if (a < min_norm) ++subnormal;
  }
  return {n, zero, flushed, subnormal, overflow};
}

std::vector<GradGroupStats> gradient_range_stats(const formats::Format& f, const std::vector<autograd::Parameter*>& params) {
  std::vector<GradGroupStats> out;
  GradRangeCounts all;
  for (const autograd::Parameter* p : params) {
    const std::string g = grad_group_name(p->name);
    const GradRangeCounts c = classify(f, p->grad.f32(), p->grad.numel());
    all.add(c);
    bool found = false;
    for (auto& s : out)
      if (s.group == g) {
        s.counts.add(c);
        found = true;
      }
    if (!found) out.push_back({g, c});
  }
  out.push_back({"all", all});
  return out;
}

std::string grad_stats_json(const formats::Format& f, const std::vector<GradGroupStats>& stats) {
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& s : stats) {
    const double n = s.counts.total > 0 ? static_cast<double>(s.counts.total) : 1.0;
    groups[s.group] = {{"zero", s.counts.zero / n},
                       {"flushed", s.counts.flushed / n},
                       {"subnormal", s.counts.subnormal / n},
                       {"overflow", s.counts.overflow / n}};
  }
  return nlohmann::json{{"format", f.name}, {"groups", groups}}.dump();
}

}  // namespace mantissa::amp
