// The --lr-sweep spec of the recipe study: a log2-spaced range or a list of rates.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "mantissa/formats/parse_number.hpp"
#include "mantissa/io/untrusted.hpp"
#include "mantissa/study/experiment.hpp"

namespace mantissa::study {

namespace {

constexpr size_t kMaxRates = 64;

[[noreturn]] void bad(const std::string& spec, const std::string& why) {
  throw std::invalid_argument("--lr-sweep '" + io::excerpt(spec) + "': " + why +
                              " (expected START:STOP:STEP with STEP in octaves, e.g. 2^-12:2^1:1 or 1e-4:1e-2:0.5, "
                              "or a comma-separated list of rates)");
}

// "2^E" (E any decimal) or a plain decimal; must be a positive finite rate.
double read_rate(const std::string& spec, const std::string& token, const char* what) {
  const std::string t(formats::trim_blanks(token));
  double v = 0;
  if (t.rfind("2^", 0) == 0) {
    double e = 0;
    if (!formats::parse_finite(t.substr(2), e)) bad(spec, std::string(what) + " '" + io::excerpt(t) + "' is not 2^EXPONENT");
    v = std::exp2(e);
  } else if (!formats::parse_finite(t, v)) {
    bad(spec, std::string(what) + " '" + io::excerpt(t) + "' is not a number");
  }
  if (!(v > 0) || !std::isfinite(v)) bad(spec, std::string(what) + " '" + io::excerpt(t) + "' is not a positive finite rate");
  return v;
}

}  // namespace

std::vector<double> parse_lr_sweep(const std::string& spec) {
  if (formats::trim_blanks(spec).empty()) bad(spec, "empty");
  std::vector<double> rates;
  if (spec.find(':') == std::string::npos) {
    std::stringstream in(spec);
    for (std::string item; std::getline(in, item, ',');) rates.push_back(read_rate(spec, item, "rate"));
    if (spec.back() == ',') bad(spec, "empty rate after the last comma");
    std::sort(rates.begin(), rates.end());
    if (std::adjacent_find(rates.begin(), rates.end()) != rates.end()) bad(spec, "a rate is listed twice");
  } else {
    std::vector<std::string> parts;
    std::stringstream in(spec);
    for (std::string item; std::getline(in, item, ':');) parts.push_back(item);
    if (parts.size() != 3 || spec.back() == ':') bad(spec, "a range has three parts");
    const double start = read_rate(spec, parts[0], "START"), stop = read_rate(spec, parts[1], "STOP");
    double step = 0;
    const std::string_view text = formats::trim_blanks(parts[2]);
    if (!formats::parse_finite(text, step) || !(step > 0))
      bad(spec, "STEP '" + io::excerpt(text) + "' is not a positive number of octaves");
    if (stop < start) bad(spec, "STOP is below START");
    // Octaves from START to STOP, with room for the rounding of decimal bounds.
    const double octaves = std::log2(stop / start);
    const double n = std::floor(octaves / step + 1e-9) + 1;
    if (n > static_cast<double>(kMaxRates)) bad(spec, "more than " + std::to_string(kMaxRates) + " rates");
    for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) rates.push_back(start * std::exp2(static_cast<double>(k) * step));
  }
  if (rates.size() > kMaxRates) bad(spec, "more than " + std::to_string(kMaxRates) + " rates");
  return rates;
}

}  // namespace mantissa::study
