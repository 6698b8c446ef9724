#include "mantissa/report/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "mantissa/io/files.hpp"

namespace mantissa::report {
namespace {

// Tableau 10: distinguishable, print-friendly.
constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr double kCharWidth = 6.8;  // px per character at font-size 12 (estimate for layout)

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string color_for(const std::string& given, size_t index) {
  return given.empty() ? kPalette[index % std::size(kPalette)] : given;
}

double nice_step(double span, int target) {
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v, bool log2) {
    if (!std::isfinite(v) || (log2 && v <= 0)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

// Final axis range and its ticks (data units).
struct AxisPlan {
  double lo = 0, hi = 1;
  std::vector<double> ticks;
};

AxisPlan plan_axis(const Axis& a, Range r, bool force_zero = false) {
  AxisPlan p;
  if (!a.categories.empty()) {
    const auto n = static_cast<double>(a.categories.size());
    p.lo = -0.5;
    p.hi = n - 0.5;
    for (size_t i = 0; i < a.categories.size(); ++i) p.ticks.push_back(static_cast<double>(i));
    return p;
  }
  if (force_zero && !a.log2) r.add(0.0, false);
  if (a.min) r.lo = *a.min;
  if (a.max) r.hi = *a.max;
  if (r.empty()) throw std::invalid_argument("plot axis '" + a.label + "': no drawable values");
  if (a.log2) {
    if (r.lo <= 0) throw std::invalid_argument("plot axis '" + a.label + "': log2 axis needs a positive minimum");
    double lo_e = a.min ? std::log2(r.lo) : std::floor(std::log2(r.lo));
    double hi_e = a.max ? std::log2(r.hi) : std::ceil(std::log2(r.hi));
    if (hi_e <= lo_e) hi_e = lo_e + 1;
    const int step = std::max(1, static_cast<int>(std::ceil((hi_e - lo_e) / 10.0)));
    for (double e = std::ceil(lo_e / step) * step; e <= hi_e + 1e-9; e += step) p.ticks.push_back(std::exp2(e));
    p.lo = std::exp2(lo_e);
    p.hi = std::exp2(hi_e);
    return p;
  }
  // Values a few ulps apart (a flat curve) plot as one value: a tick step
  // below an ulp of the values would never advance.
  if (r.hi - r.lo <= std::max(std::fabs(r.lo), std::fabs(r.hi)) * 1e-9) {
    r.lo = r.hi = (r.lo + r.hi) / 2;
    const double pad = r.lo == 0 ? 1.0 : std::fabs(r.lo) * 0.1;
    r.lo -= pad;
    r.hi += pad;
  }
  const double step = nice_step(r.hi - r.lo, 6);
  p.lo = a.min ? r.lo : std::floor(r.lo / step) * step;
  p.hi = a.max ? r.hi : std::ceil(r.hi / step) * step;
  // Ticks by count, not by repeated addition: nice_step gives at most a dozen.
  const double first = std::ceil(p.lo / step - 1e-9);
  for (int i = 0; i < 64; ++i) {
    const double t = (first + i) * step;
    if (t > p.hi + step * 1e-9) break;
    p.ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return p;
}

// Tick label as SVG text content: "2^k" with a raised exponent on log axes.
std::string tick_label(const Axis& a, double v) {
  if (!a.categories.empty()) return xml_escape(a.categories[static_cast<size_t>(std::lround(v))]);
  if (a.log2) {
    const long e = std::lround(std::log2(v));
    return "2<tspan dy=\"-5\" font-size=\"9\">" + std::to_string(e) + "</tspan>";
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

size_t longest(const std::vector<std::string>& v) {
  size_t n = 0;
  for (const auto& s : v) n = std::max(n, s.size());
  return n;
}

struct Frame {
  double left, top, width, height;
};

Frame frame_for(int width, int height, const std::string& title, const Axis& x, const std::vector<std::string>& legend) {
  const double top = title.empty() ? 16 : 42;
  const double left = 78;
  double bottom = 52;
  if (!x.categories.empty() && x.rotate_labels) bottom = 34 + static_cast<double>(longest(x.categories)) * kCharWidth * 0.72;
  const double right = legend.empty() ? 24 : 44 + static_cast<double>(longest(legend)) * kCharWidth;
  const double w = width - left - right, h = height - top - bottom;
  if (w < 60 || h < 60) throw std::invalid_argument("plot '" + title + "': " + std::to_string(width) + "x" +
                                                     std::to_string(height) + " px is too small for its labels");
  return {left, top, w, h};
}

Layout make_layout(const Frame& f, const AxisPlan& xp, const AxisPlan& yp, const Axis& x, const Axis& y) {
  Layout l;
  l.left = f.left;
  l.top = f.top;
  l.width = f.width;
  l.height = f.height;
  l.x = AxisMap(xp.lo, xp.hi, x.log2 && x.categories.empty(), f.left, f.left + f.width);
  l.y = AxisMap(yp.lo, yp.hi, y.log2, f.top + f.height, f.top);
  return l;
}

// Header, frame, grid, ticks, axis labels and title.
std::string axes_svg(int width, int height, const std::string& title, const Layout& l, const AxisPlan& xp,
                     const AxisPlan& yp, const Axis& x, const Axis& y) {
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
                  std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " + std::to_string(height) +
                  "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  s += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(width) + "\" height=\"" + std::to_string(height) + "\" fill=\"white\"/>\n";
  if (!title.empty())
    s += "<text class=\"title\" x=\"" + fmt(width / 2.0) + "\" y=\"26\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">" +
         xml_escape(title) + "</text>\n";
  const double bottom = l.top + l.height, right = l.left + l.width;
  s += "<g class=\"grid\" stroke=\"#e3e3e3\" stroke-width=\"1\">\n";
  for (double t : yp.ticks)
    s += "<line x1=\"" + fmt(l.left) + "\" y1=\"" + fmt(l.y(t)) + "\" x2=\"" + fmt(right) + "\" y2=\"" + fmt(l.y(t)) + "\"/>\n";
  for (double t : xp.ticks)
    s += "<line x1=\"" + fmt(l.x(t)) + "\" y1=\"" + fmt(l.top) + "\" x2=\"" + fmt(l.x(t)) + "\" y2=\"" + fmt(bottom) + "\"/>\n";
  s += "</g>\n";
  s += "<g class=\"yticks\" text-anchor=\"end\" fill=\"#333\">\n";
  for (double t : yp.ticks)
    s += "<text x=\"" + fmt(l.left - 6) + "\" y=\"" + fmt(l.y(t) + 4) + "\">" + tick_label(y, t) + "</text>\n";
  s += "</g>\n<g class=\"xticks\" fill=\"#333\">\n";
  for (double t : xp.ticks) {
    const double px = l.x(t), py = bottom + 16;
    if (!x.categories.empty() && x.rotate_labels)
      s += "<text x=\"" + fmt(px) + "\" y=\"" + fmt(py - 4) + "\" text-anchor=\"end\" transform=\"rotate(-45 " + fmt(px) + " " +
           fmt(py - 4) + ")\">" + tick_label(x, t) + "</text>\n";
    else
      s += "<text x=\"" + fmt(px) + "\" y=\"" + fmt(py) + "\" text-anchor=\"middle\">" + tick_label(x, t) + "</text>\n";
  }
  s += "</g>\n";
  s += "<rect class=\"frame\" x=\"" + fmt(l.left) + "\" y=\"" + fmt(l.top) + "\" width=\"" + fmt(l.width) + "\" height=\"" +
       fmt(l.height) + "\" fill=\"none\" stroke=\"#888\"/>\n";
  if (!x.label.empty())
    s += "<text class=\"xlabel\" x=\"" + fmt(l.left + l.width / 2) + "\" y=\"" + fmt(height - 8.0) +
         "\" text-anchor=\"middle\" font-size=\"13\">" + xml_escape(x.label) + "</text>\n";
  if (!y.label.empty())
    s += "<text class=\"ylabel\" x=\"18\" y=\"" + fmt(l.top + l.height / 2) + "\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 18 " +
         fmt(l.top + l.height / 2) + ")\">" + xml_escape(y.label) + "</text>\n";
  return s;
}

// Legend to the right of the plot: a swatch (line or box) and the name.
std::string legend_svg(const Layout& l, const std::vector<std::string>& names, const std::vector<std::string>& colors,
                       const std::vector<bool>& dashed, bool boxes) {
  if (names.empty()) return "";
  std::string s = "<g class=\"legend\">\n";
  const double x = l.left + l.width + 14;
  for (size_t i = 0; i < names.size(); ++i) {
    const double y = l.top + 10 + 20.0 * static_cast<double>(i);
    if (boxes)
      s += "<rect x=\"" + fmt(x) + "\" y=\"" + fmt(y - 6) + "\" width=\"18\" height=\"12\" fill=\"" + colors[i] + "\" fill-opacity=\"0.7\"/>\n";
    else
      s += "<line x1=\"" + fmt(x) + "\" y1=\"" + fmt(y) + "\" x2=\"" + fmt(x + 18) + "\" y2=\"" + fmt(y) + "\" stroke=\"" + colors[i] +
           "\" stroke-width=\"2.5\"" + (dashed[i] ? " stroke-dasharray=\"5 3\"" : "") + "/>\n";
    s += "<text x=\"" + fmt(x + 24) + "\" y=\"" + fmt(y + 4) + "\">" + xml_escape(names[i]) + "</text>\n";
  }
  return s + "</g>\n";
}

}  // namespace

AxisMap::AxisMap(double lo, double hi, bool log2, double p_lo, double p_hi) : lo_(lo), hi_(hi), p_lo_(p_lo), p_hi_(p_hi), log2_(log2) {
  if (log2 && !(lo > 0 && hi > 0)) throw std::invalid_argument("log2 axis needs positive bounds");
  if (!(hi > lo)) throw std::invalid_argument("axis range must be increasing");
}

double AxisMap::operator()(double v) const {
  if (!std::isfinite(v) || (log2_ && v <= 0)) return std::numeric_limits<double>::quiet_NaN();
  const double t = log2_ ? (std::log2(v) - std::log2(lo_)) / (std::log2(hi_) - std::log2(lo_)) : (v - lo_) / (hi_ - lo_);
  return p_lo_ + t * (p_hi_ - p_lo_);
}

namespace {
std::vector<std::string> series_names(const LinePlot& p) {
  std::vector<std::string> n;
  for (const auto& s : p.series)
    if (!s.name.empty()) n.push_back(s.name);
  return n;
}
std::vector<std::string> series_names(const HistogramPlot& p) {
  std::vector<std::string> n;
  for (const auto& s : p.series)
    if (!s.name.empty()) n.push_back(s.name);
  return n;
}

void check(const LinePlot& p) {
  if (p.series.empty()) throw std::invalid_argument("line plot '" + p.title + "': no series");
  for (const auto& s : p.series)
    if (s.x.size() != s.y.size())
      throw std::invalid_argument("line plot '" + p.title + "', series '" + s.name + "': " + std::to_string(s.x.size()) +
                                  " x values but " + std::to_string(s.y.size()) + " y values");
}

void check(const HistogramPlot& p) {
  if (p.series.empty()) throw std::invalid_argument("histogram '" + p.title + "': no series");
  for (const auto& h : p.series) {
    if (h.edges.size() != h.counts.size() + 1 || h.counts.empty())
      throw std::invalid_argument("histogram '" + p.title + "', series '" + h.name + "': needs bins + 1 edges, got " +
                                  std::to_string(h.edges.size()) + " edges for " + std::to_string(h.counts.size()) + " bins");
    if (!std::is_sorted(h.edges.begin(), h.edges.end()))
      throw std::invalid_argument("histogram '" + p.title + "', series '" + h.name + "': edges not increasing");
  }
}

std::pair<AxisPlan, AxisPlan> plans(const LinePlot& p) {
  Range xr, yr;
  for (const auto& s : p.series)
    for (size_t i = 0; i < s.x.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i]) && !(p.x.log2 && s.x[i] <= 0) && !(p.y.log2 && s.y[i] <= 0)) {
        xr.add(s.x[i], p.x.log2);
        yr.add(s.y[i], p.y.log2);
      }
  return {plan_axis(p.x, xr), plan_axis(p.y, yr)};
}

std::pair<AxisPlan, AxisPlan> plans(const HistogramPlot& p) {
  Range xr, yr;
  for (const auto& h : p.series) {
    xr.add(h.edges.front(), p.x.log2);
    xr.add(h.edges.back(), p.x.log2);
    for (double c : h.counts) yr.add(c, p.y.log2);
  }
  for (const auto& b : p.bands) {
    xr.add(b.lo, p.x.log2);
    xr.add(b.hi, p.x.log2);
  }
  // Headroom above the tallest bar for the band brackets (one row each).
  if (!yr.empty() && !p.bands.empty()) {
    const double room = 1.0 + 0.1 * static_cast<double>(p.bands.size());
    yr.hi = p.y.log2 ? yr.hi * std::exp2(room) : yr.hi * room;
  }
  return {plan_axis(p.x, xr), plan_axis(p.y, yr, true)};
}
}  // namespace

Layout layout(const LinePlot& p) {
  check(p);
  const auto [xp, yp] = plans(p);
  return make_layout(frame_for(p.width, p.height, p.title, p.x, series_names(p)), xp, yp, p.x, p.y);
}

Layout layout(const HistogramPlot& p) {
  check(p);
  const auto [xp, yp] = plans(p);
  return make_layout(frame_for(p.width, p.height, p.title, p.x, series_names(p)), xp, yp, p.x, p.y);
}

std::string render(const LinePlot& p) {
  const Layout l = layout(p);
  const auto [xp, yp] = plans(p);
  std::string s = axes_svg(p.width, p.height, p.title, l, xp, yp, p.x, p.y);
  std::vector<std::string> names, colors;
  std::vector<bool> dashed;
  s += "<g class=\"plot-area\">\n";
  for (size_t k = 0; k < p.series.size(); ++k) {
    const Series& ser = p.series[k];
    const std::string color = color_for(ser.color, k);
    std::string d, dots;
    bool pen_down = false;
    for (size_t i = 0; i < ser.x.size(); ++i) {
      const double px = l.x(ser.x[i]), py = l.y(ser.y[i]);
      if (std::isnan(px) || std::isnan(py)) {
        pen_down = false;  // a gap, not a line through missing data
        continue;
      }
      d += (pen_down ? " L" : (d.empty() ? "M" : " M")) + fmt(px) + " " + fmt(py);
      pen_down = true;
      if (ser.markers) dots += "<circle cx=\"" + fmt(px) + "\" cy=\"" + fmt(py) + "\" r=\"3.2\"/>";
    }
    s += "<g class=\"series\" data-name=\"" + xml_escape(ser.name) + "\" stroke=\"" + color + "\" fill=\"" + color + "\">\n";
    if (!d.empty())
      s += "<path d=\"" + d + "\" fill=\"none\" stroke-width=\"2\" stroke-linejoin=\"round\"" +
           (ser.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
    if (!dots.empty()) s += dots + "\n";
    s += "</g>\n";
    if (!ser.name.empty()) {
      names.push_back(ser.name);
      colors.push_back(color);
      dashed.push_back(ser.dashed);
    }
  }
  s += "</g>\n";
  s += legend_svg(l, names, colors, dashed, false);
  return s + "</svg>\n";
}

std::string render(const HistogramPlot& p) {
  const Layout l = layout(p);
  const auto [xp, yp] = plans(p);
  std::string s = axes_svg(p.width, p.height, p.title, l, xp, yp, p.x, p.y);
  const double base = l.top + l.height;
  // Bands first so the bars stay on top; labels stacked so overlapping bands stay legible.
  s += "<g class=\"bands\">\n";
  for (size_t i = 0; i < p.bands.size(); ++i) {
    const Band& b = p.bands[i];
    const std::string color = b.color.empty() ? kPalette[(i + 5) % std::size(kPalette)] : b.color;
    const double x0 = std::clamp(l.x(b.lo), l.left, l.left + l.width), x1 = std::clamp(l.x(b.hi), l.left, l.left + l.width);
    s += "<rect x=\"" + fmt(x0) + "\" y=\"" + fmt(l.top) + "\" width=\"" + fmt(x1 - x0) + "\" height=\"" + fmt(l.height) +
         "\" fill=\"" + color + "\" fill-opacity=\"0.07\" stroke=\"" + color + "\" stroke-opacity=\"0.6\" stroke-dasharray=\"4 3\"/>\n";
    // A bracket per band near the top, one row each, so overlapping ranges
    // stay readable: |<---- label ---->|.
    const double row = l.top + 17 + 18.0 * static_cast<double>(i);
    s += "<path d=\"M" + fmt(x0 + 1) + " " + fmt(row - 4) + " V" + fmt(row + 4) + " M" + fmt(x0 + 1) + " " + fmt(row) + " H" +
         fmt(x1 - 1) + " M" + fmt(x1 - 1) + " " + fmt(row - 4) + " V" + fmt(row + 4) + "\" stroke=\"" + color +
         "\" stroke-width=\"2\" fill=\"none\"/>\n";
    s += "<text x=\"" + fmt((x0 + x1) / 2) + "\" y=\"" + fmt(row - 3) + "\" text-anchor=\"middle\" fill=\"" + color +
         "\" font-size=\"11\" font-weight=\"bold\" stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\">" +
         xml_escape(b.label) + "</text>\n";
  }
  s += "</g>\n<g class=\"plot-area\">\n";
  std::vector<std::string> names, colors;
  const double groups = p.grouped ? static_cast<double>(p.series.size()) : 1.0;
  for (size_t k = 0; k < p.series.size(); ++k) {
    const Histogram& h = p.series[k];
    const std::string color = color_for(h.color, k);
    s += "<g class=\"series\" data-name=\"" + xml_escape(h.name) + "\" fill=\"" + color + "\" fill-opacity=\"" +
         (p.grouped ? "0.85" : "0.55") + "\">\n";
    for (size_t i = 0; i < h.counts.size(); ++i) {
      const double top = l.y(h.counts[i]);
      if (std::isnan(top) || h.counts[i] <= 0) continue;
      const double x0 = l.x(h.edges[i]), x1 = l.x(h.edges[i + 1]);
      const double w = (x1 - x0) / groups;
      const double bx = x0 + (p.grouped ? w * static_cast<double>(k) : 0.0);
      const double y0 = std::clamp(top, l.top, base);
      s += "<rect x=\"" + fmt(bx + 0.5) + "\" y=\"" + fmt(y0) + "\" width=\"" + fmt(std::max(w - 1.0, 0.5)) + "\" height=\"" +
           fmt(base - y0) + "\"/>\n";
    }
    s += "</g>\n";
    if (!h.name.empty()) {
      names.push_back(h.name);
      colors.push_back(color);
    }
  }
  s += "</g>\n";
  s += legend_svg(l, names, colors, std::vector<bool>(names.size(), false), true);
  return s + "</svg>\n";
}

LinePlot scale_plot(const std::vector<std::string>& ops, const std::vector<ScaleSeries>& series, std::string title,
                    std::string y_label) {
  if (ops.empty()) throw std::invalid_argument("scale plot '" + title + "': no ops");
  LinePlot p;
  p.title = std::move(title);
  p.x.label = "op (model order)";
  p.x.categories = ops;
  p.x.rotate_labels = true;
  p.y.label = std::move(y_label) + " (log2)";
  p.y.log2 = true;
  // Wide enough that every op label has room: ~18 px per op.
  p.width = std::max(900, 160 + 18 * static_cast<int>(ops.size()) + 44 + static_cast<int>(kCharWidth * 24));
  p.height = 420 + static_cast<int>(static_cast<double>(longest(ops)) * kCharWidth * 0.72);
  for (const ScaleSeries& s : series) {
    if (s.values.size() != ops.size())
      throw std::invalid_argument("scale plot series '" + s.name + "': " + std::to_string(s.values.size()) + " values for " +
                                  std::to_string(ops.size()) + " ops");
    Series line;
    line.name = s.name;
    line.dashed = s.dashed;
    for (size_t i = 0; i < ops.size(); ++i) {
      line.x.push_back(static_cast<double>(i));
      line.y.push_back(s.values[i]);
    }
    p.series.push_back(std::move(line));
  }
  return p;
}

Band format_band(std::string label, double min_subnormal, double max, std::string color) {
  if (!(min_subnormal > 0 && max > min_subnormal)) throw std::invalid_argument("format band '" + label + "': bad range");
  return {std::log2(min_subnormal), std::log2(max), std::move(label), std::move(color)};
}

std::string xml_escape(std::string_view in) {
  std::string s;
  s.reserve(in.size());
  for (char c : in) {
    switch (c) {
      case '&': s += "&amp;"; break;
      case '<': s += "&lt;"; break;
      case '>': s += "&gt;"; break;
      case '"': s += "&quot;"; break;
      case '\'': s += "&apos;"; break;
      default: s += c;
    }
  }
  return s;
}

void write_svg(const std::string& path, const std::string& svg) { io::write_file_atomic(path, svg); }

}  // namespace mantissa::report
