// The inspector's files in --out DIR: sites.csv / sites.jsonl (one row per
// site per sampled step), params.csv (gradient and update against the
// shadow), steps.csv (losses, step times), ranking.txt / ranking.json, warnings.txt and
// three figures: the SQNR heat map (sites x steps), underflow and saturation
// over time, per-parameter gradient and update cosine.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "mantissa/io/files.hpp"
#include "mantissa/report/svg.hpp"
#include "mantissa/inspect/inspect.hpp"

namespace mantissa::inspect {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char b[48];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}
std::string exact(double v) {  // parses back to the same double
  char b[48];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}
json jnum(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

json histogram(const CastTally& t) {
  size_t lo = 0, hi = t.exp_hist.size();
  while (lo < hi && t.exp_hist[lo] == 0) ++lo;
  while (hi > lo && t.exp_hist[hi - 1] == 0) --hi;
  return {{"min_exp", CastTally::kExpLo + static_cast<int>(lo)},
          {"counts", std::vector<int64_t>(t.exp_hist.begin() + static_cast<std::ptrdiff_t>(lo),
                                          t.exp_hist.begin() + static_cast<std::ptrdiff_t>(hi))}};
}

// A block-scaled cast's tile figures: counts, the exponents of the tiles'
// scales (min, median, max and the histogram) and the worst tile's SQNR.
json tiles_json(const CastTally& t) {
  json hist = json::object();
  for (const auto& [e, n] : t.block_exp) hist[std::to_string(e)] = n;
  return {{"blocks", t.blocks},
          {"exp_min", t.block_exp_min()},
          {"exp_median", t.block_exp_median()},
          {"exp_max", t.block_exp_max()},
          {"at_floor", t.blocks_at_floor},
          {"at_ceiling", t.blocks_at_ceiling},
          {"worst_sqnr_db", jnum(t.worst_block_sqnr_db)},
          {"exp_hist", hist}};
}

// SQNR in dB -> colour: red at 0 dB and below, yellow at 15, green at 30 and above.
std::string heat_colour(double db) {
  if (std::isinf(db) && db > 0) return "#ffffff";
  const double t = std::isfinite(db) ? std::clamp(db / 30.0, 0.0, 1.0) : 0.0;
  const int r = t < 0.5 ? 215 : static_cast<int>(215 - (t - 0.5) * 2 * 180);
  const int g = t < 0.5 ? static_cast<int>(48 + t * 2 * 160) : 208;
  char b[16];
  std::snprintf(b, sizeof b, "#%02x%02x%02x", r, g, 48);
  return b;
}

std::string heat_map(const InspectResult& r) {
  std::vector<std::string> sites;
  for (const auto& x : r.ranking) sites.push_back(x.site);
  std::vector<const StepRecord*> steps;
  for (const StepRecord& s : r.steps)
    if (s.sampled) steps.push_back(&s);
  const double left = 300, top = 40, cw = std::max(2.0, std::min(24.0, 900.0 / std::max<size_t>(1, steps.size()))),
               ch = 14;
  const double w = left + cw * static_cast<double>(steps.size()) + 20, h = top + ch * static_cast<double>(sites.size()) + 50;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(w) + "\" height=\"" + num(h) +
                    "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"10\" y=\"20\" font-size=\"14\">" +
         report::xml_escape("SQNR (dB) per cast site and sampled step, recipe " + r.recipe +
                            " (red <= 0, yellow 15, green >= 30, white exact)") +
         "</text>\n";
  std::map<std::string, size_t> row;
  for (size_t i = 0; i < sites.size(); ++i) {
    row[sites[i]] = i;
    svg += "<text x=\"" + num(left - 6) + "\" y=\"" + num(top + ch * (static_cast<double>(i) + 0.75)) +
           "\" text-anchor=\"end\">" + report::xml_escape(sites[i]) + "</text>\n";
  }
  for (size_t j = 0; j < steps.size(); ++j) {
    for (const auto& [info, t] : steps[j]->sites) {
      const double db = t.sqnr_db();
      svg += "<rect x=\"" + num(left + cw * static_cast<double>(j)) + "\" y=\"" +
             num(top + ch * static_cast<double>(row[info.name])) + "\" width=\"" + num(cw) + "\" height=\"" + num(ch) +
             "\" fill=\"" + heat_colour(db) + "\"><title>" + report::xml_escape(info.name) + " step " +
             std::to_string(steps[j]->step) + ": " + num(db) + " dB</title></rect>\n";
    }
  }
  const double base = top + ch * static_cast<double>(sites.size()) + 16;
  if (!steps.empty())
    svg += "<text x=\"" + num(left) + "\" y=\"" + num(base) + "\">step " + std::to_string(steps.front()->step) +
           "</text><text x=\"" + num(left + cw * static_cast<double>(steps.size())) + "\" y=\"" + num(base) +
           "\" text-anchor=\"end\">step " + std::to_string(steps.back()->step) + "</text>\n";
  return svg + "</svg>\n";
}

// Underflow (solid) and saturation (dashed) fractions over the steps, for the
// sites with the most of either (at most 8 of each).
report::LinePlot fractions_plot(const InspectResult& r) {
  report::LinePlot p;
  p.title = "Fraction of values flushed to zero (solid) and saturated (dashed), recipe " + r.recipe;
  p.x.label = "step";
  p.y.label = "fraction";
  p.y.min = 0;
  p.y.max = 1;
  std::vector<Verdicts::Ranked> by = r.ranking;
  for (int pass = 0; pass < 2; ++pass) {
    std::stable_sort(by.begin(), by.end(), [pass](const auto& a, const auto& b) {
      return pass == 0 ? a.underflow > b.underflow : a.saturation > b.saturation;
    });
    for (size_t i = 0; i < by.size() && i < 8; ++i) {
      if ((pass == 0 ? by[i].underflow : by[i].saturation) <= 0) break;
      report::Series s;
      s.name = by[i].site + (pass == 0 ? " underflow" : " saturated");
      s.dashed = pass == 1;
      s.markers = false;
      for (const StepRecord& st : r.steps)
        for (const auto& [info, t] : st.sites)
          if (info.name == by[i].site) {
            s.x.push_back(static_cast<double>(st.step));
            s.y.push_back(pass == 0 ? t.underflow() : t.saturation());
          }
      p.series.push_back(std::move(s));
    }
  }
  if (p.series.empty()) {  // nothing flushed or saturated: a flat zero line says so
    report::Series s;
    s.name = "no site flushed or saturated values";
    for (const StepRecord& st : r.steps)
      if (st.sampled) {
        s.x.push_back(static_cast<double>(st.step));
        s.y.push_back(0);
      }
    p.series.push_back(std::move(s));
  }
  return p;
}

// Per parameter (model order): mean gradient and update cosine to the shadow, and the minimum gradient cosine.
report::LinePlot cosine_plot(const InspectResult& r) {
  report::LinePlot p;
  p.title = "Cosine to the fp32 shadow per parameter (mean over sampled steps), recipe " + r.recipe;
  p.y.label = "cosine";
  p.x.rotate_labels = true;
  p.height = 640;
  std::vector<double> gsum, usum, gmin;
  std::vector<int> gn, un;
  for (const StepRecord& st : r.steps)
    for (size_t i = 0; i < st.params.size(); ++i) {
      if (p.x.categories.size() <= i) {
        p.x.categories.push_back(st.params[i].name);
        gsum.push_back(0), usum.push_back(0), gmin.push_back(1), gn.push_back(0), un.push_back(0);
      }
      const ParamCompare& c = st.params[i];
      if (std::isfinite(c.grad_cos)) gsum[i] += c.grad_cos, ++gn[i], gmin[i] = std::min(gmin[i], c.grad_cos);
      if (std::isfinite(c.update_cos)) usum[i] += c.update_cos, ++un[i];
    }
  report::Series g{"gradient cosine (mean)", {}, {}, "", false, true}, u{"update cosine (mean)", {}, {}, "", false, true},
      m{"gradient cosine (min)", {}, {}, "", true, true};
  for (size_t i = 0; i < gsum.size(); ++i) {
    const double x = static_cast<double>(i);
    g.x.push_back(x), u.x.push_back(x), m.x.push_back(x);
    g.y.push_back(gn[i] ? gsum[i] / gn[i] : std::nan(""));
    u.y.push_back(un[i] ? usum[i] / un[i] : std::nan(""));
    m.y.push_back(gn[i] ? gmin[i] : std::nan(""));
  }
  p.series = {g, u, m};
  return p;
}

}  // namespace

void prepare_out_dir(const std::string& dir) {
  io::claim_output_dir(dir, "--out", kInspectMarker, "written by mantissa inspect\n");
}

void write_inspection(const std::string& dir, const InspectResult& r) {
  const fs::path d(dir);
  std::string csv =
      "step,site,kind,format,values,sqnr_db,underflow,saturated,amax,scale_log2,blocks,block_exp_min,block_exp_median,"
      "block_exp_max,blocks_at_floor,blocks_at_ceiling,worst_block_sqnr_db\n",
      jsonl;
  std::string params = "step,param,grad_cos,grad_rel_err,update_cos,update_rel_err\n";
  std::string steps = "step,sampled,skipped,loss,shadow_loss,loss_gap,seconds,shadow_seconds\n";
  for (const StepRecord& st : r.steps) {
    steps += std::to_string(st.step) + "," + (st.sampled ? "1" : "0") + "," + (st.skipped ? "1" : "0") + "," +
             exact(st.loss) + "," + exact(st.shadow_loss) + "," + num((st.loss - st.shadow_loss) / st.shadow_loss) + "," +
             num(st.seconds) + "," + num(st.shadow_seconds) + "\n";
    for (const auto& [info, t] : st.sites) {
      csv += std::to_string(st.step) + "," + csv_field(info.name) + "," + info.kind + "," + info.format + "," +
             std::to_string(t.values) + "," + num(t.sqnr_db()) + "," + num(t.underflow()) + "," + num(t.saturation()) +
             "," + num(t.amax) + "," + std::to_string(t.scale_log2) + "," + std::to_string(t.blocks) +
             (t.blocks ? "," + std::to_string(t.block_exp_min()) + "," + std::to_string(t.block_exp_median()) + "," +
                             std::to_string(t.block_exp_max()) + "," + std::to_string(t.blocks_at_floor) + "," +
                             std::to_string(t.blocks_at_ceiling) + "," + num(t.worst_block_sqnr_db)
                       : std::string(",,,,,,")) +
             "\n";
      json row{{"step", st.step},          {"site", info.name},        {"kind", info.kind},
               {"format", info.format},    {"values", t.values},       {"sqnr_db", jnum(t.sqnr_db())},
               {"underflow", t.underflow()}, {"saturated", t.saturation()}, {"amax", t.amax},
               {"scale_log2", t.scale_log2}, {"casts", t.casts},        {"exp_hist", histogram(t)}};
      if (t.blocks) row["tiles"] = tiles_json(t);
      jsonl += row.dump() + "\n";
    }
    for (const ParamCompare& c : st.params)
      params += std::to_string(st.step) + "," + csv_field(c.name) + "," + num(c.grad_cos) + "," + num(c.grad_rel_err) +
                "," + num(c.update_cos) + "," + num(c.update_rel_err) + "\n";
  }
  std::string warnings;
  for (const Warning& w : r.warnings) warnings += "step " + std::to_string(w.step) + ": " + w.site + ": " + w.message + "\n";
  io::write_file_atomic((d / "sites.csv").string(), csv);
  io::write_file_atomic((d / "sites.jsonl").string(), jsonl);
  io::write_file_atomic((d / "params.csv").string(), params);
  io::write_file_atomic((d / "steps.csv").string(), steps);
  io::write_file_atomic((d / "warnings.txt").string(), warnings);
  io::write_file_atomic((d / "ranking.txt").string(), ranking_table(r.ranking, r.ranking.size()));
  json ranked = json::array();
  for (const Verdicts::Ranked& x : r.ranking) {
    json row{{"site", x.site},           {"kind", x.kind},           {"format", x.format},
             {"lost", x.lost},           {"sqnr_db", jnum(x.sqnr_db)}, {"min_sqnr_db", jnum(x.min_sqnr_db)},
             {"underflow", x.underflow}, {"saturated", x.saturation}, {"amax", x.amax},
             {"scale_log2", x.scale_log2}, {"cause", x.cause}};
    if (x.tiles.blocks) row["tiles"] = tiles_json(x.tiles);
    ranked.push_back(std::move(row));
  }
  io::write_file_atomic((d / "ranking.json").string(),
                        json{{"recipe", r.recipe}, {"shadow", r.shadow_recipe}, {"sites", ranked}}.dump(1) + "\n");
  io::write_file_atomic((d / "sqnr_heatmap.svg").string(), heat_map(r));
  report::write_svg((d / "fractions.svg").string(), report::render(fractions_plot(r)));
  if (!r.steps.empty() && !r.steps.front().params.empty())
    report::write_svg((d / "grad_cosine.svg").string(), report::render(cosine_plot(r)));
}

}  // namespace mantissa::inspect
