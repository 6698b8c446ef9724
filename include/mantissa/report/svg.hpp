// A small dependency-free SVG plot writer for reports a person reads at a
// glance: line plots (several series, legend, ticks, optional log2 axes,
// categorical x with rotated labels), overlaid or grouped histograms with
// shaded bands (e.g. the FP16 and FP8 exponent ranges), and the unit-scaling
// per-op scale plot. Output is standalone SVG 1.1 (renders in browsers and
// rsvg-convert); files are written atomically.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mantissa::report {

struct Axis {
  std::string label;
  bool log2 = false;  // values <= 0 are not drawn on a log axis
  std::optional<double> min, max;  // data range override (auto: from the data; log2 auto snaps to powers of two)
  // Non-empty: a categorical axis; value i sits at category i, labelled by it.
  std::vector<std::string> categories;
  bool rotate_labels = false;  // tick labels at -45 degrees (long op names)
};

struct Series {
  std::string name;
  std::vector<double> x, y;  // NaN (or <= 0 on a log axis) breaks the line
  std::string color;         // empty: next palette colour
  bool dashed = false;
  bool markers = true;
};

struct LinePlot {
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  int width = 900, height = 500;
};

struct Histogram {
  std::string name;
  std::vector<double> edges;   // bins + 1 increasing bin edges
  std::vector<double> counts;  // one per bin
  std::string color;
};

// A shaded x interval behind the bars, e.g. the exponents FP16 can hold.
struct Band {
  double lo = 0, hi = 0;
  std::string label;
  std::string color;
};

struct HistogramPlot {
  std::string title;
  Axis x, y;
  std::vector<Histogram> series;
  std::vector<Band> bands;
  bool grouped = false;  // false: overlaid, translucent; true: side by side in each bin
  int width = 900, height = 500;
};

// Data -> pixel map of one axis (exposed so tests can check coordinates).
class AxisMap {
 public:
  AxisMap() = default;
  // Maps [lo, hi] (data units; on a log2 axis both > 0) onto [p_lo, p_hi].
  AxisMap(double lo, double hi, bool log2, double p_lo, double p_hi);
  double operator()(double v) const;  // pixel; NaN if v cannot be drawn
  double lo() const { return lo_; }
  double hi() const { return hi_; }
  bool log2() const { return log2_; }

 private:
  double lo_ = 0, hi_ = 1, p_lo_ = 0, p_hi_ = 1;
  bool log2_ = false;
};

struct Layout {
  double left = 0, top = 0, width = 0, height = 0;  // plot area in pixels
  AxisMap x, y;
};
Layout layout(const LinePlot& p);
Layout layout(const HistogramPlot& p);

// Throw std::invalid_argument for mismatched sizes, empty plots and the like.
std::string render(const LinePlot& p);
std::string render(const HistogramPlot& p);

// Unit-scaling scale plot: one line per (pass, model) over the ops in model
// order, log2 y axis, op names as rotated x labels. values[i] belongs to
// ops[i]; NaN where the series has no value for that op.
struct ScaleSeries {
  std::string name;  // e.g. "unit forward", "standard backward"
  std::vector<double> values;
  bool dashed = false;  // e.g. backward dashed, forward solid
};
LinePlot scale_plot(const std::vector<std::string>& ops, const std::vector<ScaleSeries>& series, std::string title,
                    std::string y_label = "RMS");

// Bands from log2(min_subnormal) to log2(max) of a format, for exponent histograms.
Band format_band(std::string label, double min_subnormal, double max, std::string color = "");

std::string xml_escape(std::string_view s);
// Writes svg to path atomically (temp file + rename).
void write_svg(const std::string& path, const std::string& svg);

}  // namespace mantissa::report
