// The inspector's verdicts: early warnings as sampled steps come in, and the
// ranking of sites by how much of the signal their casts lose. Used by
// `mantissa inspect` (with the shadow's loss gap and update cosines) and by
// `mantissa train --watch` (cast sites only).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "mantissa/inspect/inspect.hpp"

namespace mantissa::inspect {
namespace {

std::string num(const char* fmt, double v) {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

std::string db(double v) { return std::isinf(v) ? (v > 0 ? "exact" : "-inf") : num("%.1f", v); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// The tile figures of b added to a's.
void pool_tiles(CastTally& a, const CastTally& b) {
  a.blocks += b.blocks;
  a.blocks_at_floor += b.blocks_at_floor;
  a.blocks_at_ceiling += b.blocks_at_ceiling;
  for (const auto& [e, n] : b.block_exp) a.block_exp[e] += n;
  a.worst_block_sqnr_db = std::min(a.worst_block_sqnr_db, b.worst_block_sqnr_db);
}

std::string exp_range(const CastTally& t) {
  return "2^" + std::to_string(t.block_exp_min()) + "..2^" + std::to_string(t.block_exp_max());
}

}  // namespace

std::string cause_text(const Verdicts::Ranked& r) {
  const std::string scale = r.tiles.blocks ? "with tile scales " + exp_range(r.tiles)
                                           : "at scale 2^" + std::to_string(r.scale_log2);
  if (r.underflow >= 0.05 || (r.underflow >= 0.001 && r.saturation < 1e-4))
    return num("%.1f%%", 100 * r.underflow) + " of nonzero values flushed to zero, below " + r.format +
           "'s smallest subnormal" + (r.min_subnormal > 0 ? " 2^" + std::to_string(std::ilogb(r.min_subnormal)) : "") +
           " " + scale;
  if (r.saturation > 0)
    return num("%.3g%%", 100 * r.saturation) + " of values beyond " + r.format + "'s max " + num("%g", r.max) + " " +
           scale + " (saturated or overflowed)";
  return "rounding only (" + r.format + ", " + scale + ")";
}

void VerdictOptions::validate() const {
  const std::pair<const char*, double> thresholds[] = {
      {"the SQNR floor (--sqnr-floor)", sqnr_floor_db}, {"the underflow threshold", underflow},
      {"the loss-gap threshold", loss_gap}, {"the update-cosine threshold", update_cosine}};
  for (const auto& [what, v] : thresholds)
    if (!std::isfinite(v)) throw std::invalid_argument(std::string(what) + " must be a finite number, got " + std::to_string(v));
  const std::pair<const char*, int> counts[] = {{"saturation_steps", saturation_steps},
                                                {"loss_gap_steps", loss_gap_steps},
                                                {"update_cosine_steps", update_cosine_steps}};
  for (const auto& [what, v] : counts)
    if (v < 1) throw std::invalid_argument(std::string("verdict option ") + what + " must be >= 1, got " + std::to_string(v));
}

std::vector<Warning> Verdicts::feed(int64_t step, const std::vector<std::pair<SiteInfo, CastTally>>& sites,
                                    std::optional<double> loss_gap, const std::vector<ParamCompare>& params) {
  std::vector<Warning> fired;
  const auto warn = [&](const std::string& site, std::string msg) {
    fired.push_back({step, site, std::move(msg)});
    warnings_.push_back(fired.back());
  };
  for (const auto& [info, t] : sites) {
    auto [it, fresh] = sites_.try_emplace(info.name);
    History& h = it->second;
    if (fresh) {
      h.info = info;
      order_.push_back(info.name);
    }
    const double s = t.sqnr_db();
    h.sqnr.push_back(s);
    h.underflow.push_back(t.underflow());
    h.saturation.push_back(t.saturation());
    h.amax = std::max(h.amax, t.amax);
    h.scale_log2 = t.scale_log2;
    pool_tiles(h.tiles, t);
    h.saturated_run = t.saturated > 0 ? h.saturated_run + 1 : 0;
    Ranked r;
    r.format = info.format;
    r.underflow = t.underflow();
    r.saturation = t.saturation();
    r.scale_log2 = t.scale_log2;
    pool_tiles(r.tiles, t);
    r.min_subnormal = info.min_subnormal;
    r.max = info.max;
    // One line per site for the first of: SQNR below the floor, too much underflow.
    if (s < o_.sqnr_floor_db && !h.warned_sqnr) {
      h.warned_sqnr = h.warned_underflow = true;
      warn(info.name, "SQNR " + db(s) + " dB below the floor of " + db(o_.sqnr_floor_db) + " dB: " + cause_text(r));
    }
    if (r.underflow > o_.underflow && !h.warned_underflow) {
      h.warned_underflow = true;
      warn(info.name, cause_text(r));
    }
    if (h.saturated_run >= o_.saturation_steps && !h.warned_sat) {
      h.warned_sat = true;
      warn(info.name, "saturated in " + std::to_string(h.saturated_run) + " sampled steps in a row (" +
                          num("%.3g%%", 100 * r.saturation) + " of values beyond " + info.format + "'s max " +
                          num("%g", info.max) + " " +
                          (t.blocks ? "with tile scales " + exp_range(t) : "at scale 2^" + std::to_string(t.scale_log2)) +
                          ")");
    }
  }
  if (loss_gap) {
    gaps_.push_back(*loss_gap);
    gap_run_ = *loss_gap > o_.loss_gap ? gap_run_ + 1 : 0;
    const size_t n = gaps_.size();
    const bool growing = gap_run_ >= 2 && gaps_[n - 1] > gaps_[n - static_cast<size_t>(gap_run_)];
    if (gap_run_ >= o_.loss_gap_steps && growing && !warned_gap_) {
      warned_gap_ = true;
      warn("loss", "loss gap to the fp32 shadow " + num("%+.2f%%", 100 * *loss_gap) + " and growing over " +
                       std::to_string(gap_run_) + " sampled steps");
    }
  }
  for (const ParamCompare& p : params) {
    int& run = cos_run_[p.name];
    run = p.update_cos < o_.update_cosine ? run + 1 : 0;
    if (run >= o_.update_cosine_steps && !warned_cos_[p.name]) {
      warned_cos_[p.name] = true;
      warn(p.name, "update cosine to fp32 " + num("%.3f", p.update_cos) + " (below " + num("%.2f", o_.update_cosine) +
                       " for " + std::to_string(run) + " sampled steps; gradient cosine " + num("%.3f", p.grad_cos) +
                       ")");
    }
  }
  return fired;
}

std::vector<Verdicts::Ranked> Verdicts::ranking() const {
  std::vector<Ranked> out;
  for (const std::string& name : order_) {
    const History& h = sites_.at(name);
    Ranked r;
    r.site = name;
    r.kind = h.info.kind;
    r.format = h.info.format;
    r.sqnr_db = median(h.sqnr);
    r.min_sqnr_db = *std::min_element(h.sqnr.begin(), h.sqnr.end());
    r.underflow = mean(h.underflow);
    r.saturation = mean(h.saturation);
    r.amax = h.amax;
    r.scale_log2 = h.scale_log2;
    r.tiles = h.tiles;
    r.min_subnormal = h.info.min_subnormal;
    r.max = h.info.max;
    r.cause = cause_text(r);
    r.lost = std::max({r.underflow, r.saturation, std::isfinite(r.sqnr_db) ? std::pow(10.0, -r.sqnr_db / 10) : r.sqnr_db < 0 ? 1.0 : 0.0});
    out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(), [](const Ranked& a, const Ranked& b) {
    if (a.lost != b.lost) return a.lost > b.lost;
    return a.sqnr_db < b.sqnr_db;
  });
  return out;
}

// The table: per-tensor sites show their scale's exponent; block-scaled
// ones the min|median|max exponent of their tiles' scales, the share of
// tiles at the scale format's floor and ceiling and the worst tile's SQNR.
std::string ranking_table(const std::vector<Verdicts::Ranked>& rows, size_t limit) {
  std::string s;
  char b[640];
  std::snprintf(b, sizeof b, "%4s  %-36s %-7s %7s %8s %8s %9s %9s %-14s %6s %6s %8s  %s\n", "rank", "site", "format",
                "lost", "SQNR dB", "min dB", "underflow", "saturated", "scale log2", "floor", "ceil", "tile dB", "cause");
  s += b;
  for (size_t i = 0; i < rows.size() && i < limit; ++i) {
    const Verdicts::Ranked& r = rows[i];
    const CastTally& t = r.tiles;
    const std::string scale = t.blocks ? std::to_string(t.block_exp_min()) + "|" + std::to_string(t.block_exp_median()) +
                                             "|" + std::to_string(t.block_exp_max())
                                       : std::to_string(r.scale_log2);
    const std::string fl = t.blocks ? num("%.1f%%", 100 * t.floor_fraction()) : "-",
                      ce = t.blocks ? num("%.1f%%", 100 * t.ceiling_fraction()) : "-",
                      worst = t.blocks ? db(t.worst_block_sqnr_db) : "-";
    std::snprintf(b, sizeof b, "%4zu  %-36s %-7s %6.2f%% %8s %8s %8.2f%% %8.3f%% %-14s %6s %6s %8s  %s\n", i + 1,
                  r.site.c_str(), r.format.c_str(), 100 * r.lost, db(r.sqnr_db).c_str(), db(r.min_sqnr_db).c_str(),
                  100 * r.underflow, 100 * r.saturation, scale.c_str(), fl.c_str(), ce.c_str(), worst.c_str(),
                  r.cause.c_str());
    s += b;
  }
  return s;
}

}  // namespace mantissa::inspect
