// SVG plot writer: output is well-formed XML (checked by a minimal parser
// here), carries every series, and data map to the pixels computed from the
// plot frame independently of the renderer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "mantissa/report/svg.hpp"

namespace rp = mantissa::report;

namespace {

// Minimal XML well-formedness: balanced, properly nested elements, quoted
// attributes with unique names, only the five predefined entities, one root.
// Returns "" if well-formed, else what is wrong and where.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> stack;
  int roots = 0;
  size_t i = 0;
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.'; };
  auto check_text = [&](size_t from, size_t to) -> std::string {
    for (size_t k = from; k < to; ++k) {
      if (s[k] == '<') return "stray '<' at " + std::to_string(k);
      if (s[k] == '&') {
        const size_t semi = s.find(';', k);
        const std::string ent = semi == std::string::npos ? "" : s.substr(k, semi - k + 1);
        if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;")
          return "bad entity at " + std::to_string(k);
      }
    }
    return "";
  };
  while (i < s.size()) {
    const size_t lt = s.find('<', i);
    if (const std::string p = check_text(i, lt == std::string::npos ? s.size() : lt); !p.empty()) return p;
    if (lt == std::string::npos) break;
    if (stack.empty() && roots == 0 && s.find_first_not_of(" \n\t", i) != lt) return "text before root";
    if (s.compare(lt, 2, "</") == 0) {
      const size_t gt = s.find('>', lt);
      const std::string name = s.substr(lt + 2, gt - lt - 2);
      if (stack.empty() || stack.back() != name) return "mismatched </" + name + "> at " + std::to_string(lt);
      stack.pop_back();
      i = gt + 1;
      continue;
    }
    size_t k = lt + 1;
    const size_t name_start = k;
    while (k < s.size() && name_char(s[k])) ++k;
    const std::string name = s.substr(name_start, k - name_start);
    if (name.empty()) return "empty tag name at " + std::to_string(lt);
    std::vector<std::string> attrs;
    while (true) {
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      if (k >= s.size()) return "unterminated tag " + name;
      if (s[k] == '>' || s.compare(k, 2, "/>") == 0) break;
      const size_t a0 = k;
      while (k < s.size() && name_char(s[k])) ++k;
      const std::string attr = s.substr(a0, k - a0);
      if (attr.empty() || s[k] != '=' || s[k + 1] != '"') return "bad attribute in <" + name + "> at " + std::to_string(a0);
      for (const auto& a : attrs)
        if (a == attr) return "duplicate attribute " + attr + " in <" + name + ">";
      attrs.push_back(attr);
      const size_t close = s.find('"', k + 2);
      if (close == std::string::npos) return "unterminated attribute " + attr;
      if (const std::string p = check_text(k + 2, close); !p.empty()) return p + " (in attribute " + attr + ")";
      k = close + 1;
    }
    const bool self_closing = s[k] == '/';
    if (stack.empty()) {
      if (++roots > 1) return "second root element <" + name + ">";
    }
    if (!self_closing) stack.push_back(name);
    i = k + (self_closing ? 2 : 1);
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  if (roots != 1) return "no root element";
  return "";
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

}  // namespace

TEST(SvgXmlChecker, RejectsBrokenDocuments) {
  EXPECT_EQ(xml_problem("<svg><g></g></svg>"), "");
  EXPECT_NE(xml_problem("<svg><g></svg>"), "");
  EXPECT_NE(xml_problem("<svg a=\"1\" a=\"2\"/>"), "");
  EXPECT_NE(xml_problem("<svg>a & b</svg>"), "");
  EXPECT_NE(xml_problem("<svg/><svg/>"), "");
  EXPECT_NE(xml_problem("<svg x=1/>"), "");
}

TEST(SvgLinePlot, WellFormedSeriesAndLog2Coordinates) {
  rp::LinePlot p;
  p.title = "scales <forward> & backward";
  p.x.label = "step";
  p.y.label = "rms";
  p.y.log2 = true;
  p.series.push_back({"a & b", {0, 1, 2, 3}, {0.0625, 1.0, NAN, 16.0}, "", false, true});
  p.series.push_back({"second", {0, 3}, {0.5, 2.0}, "#123456", true, true});
  const std::string svg = rp::render(p);
  EXPECT_EQ(xml_problem(svg), "") << svg;
  EXPECT_EQ(count(svg, "class=\"series\""), 2);
  EXPECT_NE(svg.find("data-name=\"a &amp; b\""), std::string::npos);
  EXPECT_NE(svg.find("scales &lt;forward&gt; &amp; backward"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray=\"6 4\""), std::string::npos);
  EXPECT_NE(svg.find("#123456"), std::string::npos);
  // Data spans 2^-4 .. 2^4 exactly, so y = 1 sits half-way down the frame
  // and y = 2^-4 on its bottom edge.
  const rp::Layout l = rp::layout(p);
  EXPECT_DOUBLE_EQ(l.y.lo(), 0.0625);
  EXPECT_DOUBLE_EQ(l.y.hi(), 16.0);
  const double mid = l.top + l.height / 2;
  EXPECT_NEAR(l.y(1.0), mid, 1e-9);
  EXPECT_NEAR(l.y(0.0625), l.top + l.height, 1e-9);
  EXPECT_NEAR(l.y(4.0), l.top + l.height / 4, 1e-9);  // 2 of 8 octaves below the top
  EXPECT_NEAR(l.x(l.x.lo()), l.left, 1e-9);
  const double x1 = l.left + l.width * (1.0 - l.x.lo()) / (l.x.hi() - l.x.lo());
  EXPECT_NE(svg.find("<circle cx=\"" + px(x1) + "\" cy=\"" + px(mid) + "\""), std::string::npos) << svg;
  // The NaN breaks the first line into two pieces: one move, one more move.
  const std::regex path_re("<path d=\"([^\"]*)\"");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, path_re));
  EXPECT_EQ(count(m[1].str(), "M"), 2) << m[1];
  // log2 tick labels 2^-4 .. 2^4.
  EXPECT_NE(svg.find("2<tspan dy=\"-5\" font-size=\"9\">-4</tspan>"), std::string::npos);
  EXPECT_NE(svg.find("2<tspan dy=\"-5\" font-size=\"9\">4</tspan>"), std::string::npos);
}

// A curve whose values are one ulp apart (a real flat validation curve)
// gets a padded axis with a handful of ticks, and the render ends.
TEST(SvgLinePlot, ValuesOneUlpApartStillGetAnAxis) {
  rp::LinePlot p;
  p.x.label = "step";
  p.y.label = "val bpc";
  p.series.push_back({"flat", {1, 2}, {7.9, 7.900000000000001}, "", false, false});
  const std::string svg = rp::render(p);
  EXPECT_EQ(xml_problem(svg), "") << svg;
  const rp::Layout l = rp::layout(p);
  EXPECT_LT(l.y.lo(), 7.9);
  EXPECT_GT(l.y.hi(), 7.900000000000001);
  EXPECT_GT(l.y.hi() - l.y.lo(), 1.0);  // padded by a tenth of the value each side
}

TEST(SvgLinePlot, BadInputIsNamed) {
  rp::LinePlot p;
  EXPECT_THROW(rp::render(p), std::invalid_argument);
  p.series.push_back({"s", {1, 2}, {1}, "", false, true});
  try {
    rp::render(p);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'s'"), std::string::npos) << e.what();
  }
  rp::LinePlot q;
  q.y.log2 = true;
  q.series.push_back({"neg", {1, 2}, {-1, 0}, "", false, true});
  EXPECT_THROW(rp::render(q), std::invalid_argument);  // nothing drawable on a log axis
}

TEST(SvgScalePlot, OpsAsRotatedCategories) {
  const std::vector<std::string> ops{"embed", "block0.attn", "block0.mlp", "head", "loss"};
  const std::vector<rp::ScaleSeries> series{
      {"unit forward", {1.0, 0.9, 1.1, 1.0, 1.0}, false},
      {"unit backward", {1.0, 1.2, 0.8, 1.0, NAN}, true},
      {"standard forward", {0.02, 0.3, 0.5, 4.0, 5.5}, false},
  };
  const rp::LinePlot p = rp::scale_plot(ops, series, "per-op scale at init");
  const std::string svg = rp::render(p);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "class=\"series\""), 3);
  for (const auto& op : ops) EXPECT_NE(svg.find(">" + op + "</text>"), std::string::npos) << op;
  EXPECT_EQ(count(svg, "rotate(-45"), 5);
  // Category i sits at x = left + width * (i + 0.5) / n.
  const rp::Layout l = rp::layout(p);
  EXPECT_NEAR(l.x(3.0), l.left + l.width * 3.5 / 5.0, 1e-9);
  // Auto log2 range snaps to powers of two around 0.02 .. 5.5: 2^-6 .. 2^3.
  EXPECT_DOUBLE_EQ(l.y.lo(), 1.0 / 64);
  EXPECT_DOUBLE_EQ(l.y.hi(), 8.0);
  EXPECT_THROW(rp::scale_plot(ops, {{"short", {1.0}, false}}, "x"), std::invalid_argument);
}

TEST(SvgHistogram, BandsAndGroupedBars) {
  rp::HistogramPlot h;
  h.title = "gradient exponents";
  h.x.label = "log2 |g|";
  h.y.label = "count";
  h.series.push_back({"fp32 grads", {-30, -20, -10, 0}, {5, 10, 20}, ""});
  h.series.push_back({"unit grads", {-30, -20, -10, 0}, {0, 4, 30}, ""});
  h.bands.push_back(rp::format_band("FP16", std::ldexp(1.0, -24), 65504.0));
  h.bands.push_back(rp::format_band("FP8 E4M3", std::ldexp(1.0, -9), 448.0));
  h.grouped = true;
  const std::string svg = rp::render(h);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "class=\"series\""), 2);
  EXPECT_NE(svg.find(">FP16</text>"), std::string::npos);
  EXPECT_NE(svg.find(">FP8 E4M3</text>"), std::string::npos);
  const rp::Layout l = rp::layout(h);
  // y axis starts at 0 and leaves headroom for the two band brackets:
  // 30 * 1.2 = 36, rounded up to the nice 40.
  EXPECT_DOUBLE_EQ(l.y.lo(), 0.0);
  EXPECT_DOUBLE_EQ(l.y.hi(), 40.0);
  // FP16 band starts at exponent -24.
  EXPECT_NE(svg.find("<rect x=\"" + px(l.x(-24.0)) + "\""), std::string::npos);
  // Grouped: bin [-10, 0) of series 0 (count 20) fills the left half of the bin.
  const double x0 = l.x(-10.0), w = (l.x(0.0) - x0) / 2;
  const double top = l.top + l.height * (1.0 - 20.0 / 40.0);
  EXPECT_NE(svg.find("<rect x=\"" + px(x0 + 0.5) + "\" y=\"" + px(top) + "\" width=\"" + px(w - 1) + "\""), std::string::npos)
      << svg;
  // Zero counts draw nothing: 3 + 2 bars.
  const std::regex bar("<rect x=\"[0-9.]+\" y=\"[0-9.]+\" width=\"[0-9.]+\" height=\"[0-9.]+\"/>");
  EXPECT_EQ(std::distance(std::sregex_iterator(svg.begin(), svg.end(), bar), std::sregex_iterator()), 5);
  h.series[0].edges.pop_back();
  EXPECT_THROW(rp::render(h), std::invalid_argument);
}

TEST(SvgFile, WrittenAtomically) {
  rp::LinePlot p;
  p.series.push_back({"s", {1, 2, 3}, {3, 1, 2}, "", false, true});
  const auto path = std::filesystem::temp_directory_path() / "mantissa_svg_test.svg";
  const std::string svg = rp::render(p);
  rp::write_svg(path.string(), svg);
  std::ifstream f(path);
  std::stringstream back;
  back << f.rdbuf();
  EXPECT_EQ(back.str(), svg);
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  std::filesystem::remove(path);
  EXPECT_THROW(rp::write_svg("/nonexistent-dir/x.svg", svg), std::runtime_error);
}
