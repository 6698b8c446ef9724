#include "mantissa/unit/stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "mantissa/io/files.hpp"

namespace mantissa::unit {
namespace {

constexpr int64_t kParallelThreshold = int64_t{1} << 16;

// Thresholds of one format for round-to-nearest-even (see TensorStats).
struct Thresholds {
  double zero_at_most;      // |x| <= this rounds to 0 (or < min_normal when flushing)
  bool flush_below_normal;  // no subnormals: flush everything below min_normal
  double normal_from;       // |x| >= this rounds to a normal number
  double max;
};

Thresholds thresholds(const formats::Format& f) {
  const double sub = f.min_subnormal(), norm = f.min_normal();
  if (!f.subnormals || sub >= norm) return {norm, true, norm, f.max()};
  // Ties at sub/2 go to 0 (even); ties at norm - sub/2 go to min_normal
  // (its mantissa is even, the largest subnormal's is odd).
  return {sub / 2, false, norm - sub / 2, f.max()};
}

}  // namespace

TensorStats stats(const float* x, size_t count, const formats::Format* fmt) {
  TensorStats s;
  const auto n = static_cast<int64_t>(count);
  s.n = n;
  if (n == 0) return s;
  double sum = 0, sum_sq = 0, sum_abs = 0, max_abs = 0;
  double min_abs = std::numeric_limits<double>::infinity();
  int64_t nan = 0, zero = 0;
#pragma omp parallel for reduction(+ : sum, sum_sq, sum_abs, nan, zero) reduction(max : max_abs) \
    reduction(min : min_abs) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    if (std::isnan(v)) {
      ++nan;
      continue;
    }
    const double a = std::fabs(v);
    sum += v;
    sum_sq += v * v;
    sum_abs += a;
    max_abs = std::max(max_abs, a);
    if (a == 0) ++zero;
    else min_abs = std::min(min_abs, a);
  }
  const int64_t valid = n - nan;
  const double dn = static_cast<double>(n);
  s.nan = static_cast<double>(nan) / dn;
  s.zero = static_cast<double>(zero) / dn;
  if (valid == 0) return s;
  const double dv = static_cast<double>(valid);
  s.mean = sum / dv;
  s.rms = std::sqrt(sum_sq / dv);
  s.mean_abs = sum_abs / dv;
  s.max_abs = max_abs;
  s.min_abs = std::isinf(min_abs) ? 0.0 : min_abs;

  // Second pass: centred squares (no cancellation when |mean| >> std) and
  // the format shares.
  const double mean = s.mean;
  double centred = 0;
  int64_t under = 0, sub = 0, over = 0;
  const Thresholds t = fmt ? thresholds(*fmt) : Thresholds{0, false, 0, std::numeric_limits<double>::infinity()};
  const bool with_format = fmt != nullptr;
#pragma omp parallel for reduction(+ : centred, under, sub, over) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    if (std::isnan(v)) continue;
    centred += (v - mean) * (v - mean);
    if (!with_format) continue;
    const double a = std::fabs(v);
    if (a == 0) continue;
    if (a > t.max) ++over;
    else if (t.flush_below_normal ? a < t.zero_at_most : a <= t.zero_at_most) ++under;
    else if (a < t.normal_from) ++sub;
  }
  s.std = std::isinf(max_abs) ? std::numeric_limits<double>::infinity() : std::sqrt(centred / dv);
  s.underflow = static_cast<double>(under) / dn;
  s.subnormal = static_cast<double>(sub) / dn;
  s.overflow = static_cast<double>(over) / dn;
  return s;
}

ExponentHistogram exponent_histogram(const float* x, size_t count, int lo, int hi) {
  if (hi < lo) throw std::invalid_argument("exponent_histogram: hi " + std::to_string(hi) + " < lo " + std::to_string(lo));
  ExponentHistogram h;
  h.lo = lo;
  h.hi = hi;
  h.counts.assign(static_cast<size_t>(hi - lo + 1), 0);
  for (size_t i = 0; i < count; ++i) {
    const float v = x[i];
    if (!std::isfinite(v)) {
      ++h.nonfinite;
      continue;
    }
    if (v == 0) {
      ++h.zeros;
      continue;
    }
    // ilogb is exact for subnormals too (floor of log2 |v|).
    const int e = std::clamp(std::ilogb(v), lo, hi);
    ++h.counts[static_cast<size_t>(e - lo)];
  }
  return h;
}

const char* pass_name(Pass p) { return p == Pass::forward ? "forward" : "backward"; }

ScaleRecorder::ScaleRecorder(std::optional<formats::Format> forward_format, std::optional<formats::Format> backward_format)
    : forward_format_(std::move(forward_format)), backward_format_(std::move(backward_format)) {}

const formats::Format* ScaleRecorder::format(Pass p) const {
  const auto& f = p == Pass::forward ? forward_format_ : backward_format_;
  return f ? &*f : nullptr;
}

void ScaleRecorder::record(std::string op, Pass pass, const float* x, size_t n) {
  if (op.empty()) throw std::invalid_argument("ScaleRecorder::record: empty op name");
  if (op.find_first_of(",\"\n") != std::string::npos)
    throw std::invalid_argument("ScaleRecorder::record: op name '" + op + "' contains a comma, quote or newline");
  rows_.push_back({std::move(op), pass, stats(x, n, format(pass))});
}

std::vector<ScaleRow> ScaleRecorder::model_order() const {
  std::vector<ScaleRow> out;
  std::vector<bool> used(rows_.size(), false);
  for (size_t i = 0; i < rows_.size(); ++i)
    if (rows_[i].pass == Pass::forward) {
      out.push_back(rows_[i]);
      used[i] = true;
    }
  const size_t forward_count = out.size();
  for (size_t f = 0; f < forward_count; ++f) {
    const std::string op = out[f].op;
    for (size_t i = 0; i < rows_.size(); ++i)
      if (!used[i] && rows_[i].op == op) {
        out.push_back(rows_[i]);
        used[i] = true;
      }
  }
  for (size_t i = 0; i < rows_.size(); ++i)
    if (!used[i]) out.push_back(rows_[i]);
  return out;
}

namespace {
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}
}  // namespace

std::string ScaleRecorder::csv() const {
  std::string s = "op,pass,rms,std,mean_abs,max_abs,min_abs,underflow,subnormal,overflow\n";
  for (const ScaleRow& r : model_order()) {
    const TensorStats& t = r.stats;
    // append() rather than operator+ chains: GCC 12 -O3 emits a false
    // -Wrestrict on "literal" + std::string.
    s.append(r.op).append(",").append(pass_name(r.pass));
    for (double v : {t.rms, t.std, t.mean_abs, t.max_abs, t.min_abs, t.underflow, t.subnormal, t.overflow})
      s.append(",").append(number(v));
    s.append("\n");
  }
  return s;
}

void ScaleRecorder::write_csv(const std::string& path) const { io::write_file_atomic(path, csv()); }

std::string ScaleRecorder::table() const {
  const std::vector<ScaleRow> rows = model_order();
  const std::vector<std::string> head{"op", "pass", "rms", "std", "mean_abs", "max_abs", "min_abs", "underflow", "subnormal", "overflow"};
  std::vector<std::vector<std::string>> cells{head};
  for (const ScaleRow& r : rows) {
    const TensorStats& t = r.stats;
    std::vector<std::string> line{r.op, pass_name(r.pass)};
    for (double v : {t.rms, t.std, t.mean_abs, t.max_abs, t.min_abs}) line.push_back(number(v));
    for (double v : {t.underflow, t.subnormal, t.overflow}) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3f%%", 100.0 * v);
      line.push_back(buf);
    }
    cells.push_back(std::move(line));
  }
  std::vector<size_t> width(head.size(), 0);
  for (const auto& line : cells)
    for (size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  std::string out;
  for (size_t l = 0; l < cells.size(); ++l) {
    for (size_t c = 0; c < cells[l].size(); ++c) {
      const std::string& v = cells[l][c];
      const std::string pad(width[c] - v.size(), ' ');
      // Names left-aligned, numbers right-aligned so magnitudes line up.
      if (c < 2) out.append(v).append(pad);
      else out.append(pad).append(v);
      out += c + 1 < cells[l].size() ? "  " : "\n";
    }
    if (l == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      out += std::string(total - 2, '-') + "\n";
    }
  }
  return out;
}

}  // namespace mantissa::unit
