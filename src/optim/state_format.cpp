#include "mantissa/optim/state_format.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "mantissa/formats/format.hpp"

namespace mantissa::optim {

namespace {

constexpr const char* kValid = "fp32, bf16, fp16, e4m3fn, e5m2, e4m3fnuz, e5m2fnuz";

DType parse_one(std::string_view part, std::string_view spec) {
  const std::string s(part);
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::e4m3fn, DType::e5m2, DType::e4m3fnuz, DType::e5m2fnuz})
    if (s == dtype_format_name(t) || s == dtype_name(t)) return t;
  throw std::invalid_argument("optimizer state format '" + std::string(spec) + "': unknown format '" + s +
                              "' (valid: " + kValid + ", or M/V for the first/second moment)");
}

}  // namespace

StateFormat parse_state_format(std::string_view spec) {
  const size_t slash = spec.find('/');
  if (slash == std::string_view::npos) {
    const DType t = parse_one(spec, spec);
    return {t, t};
  }
  if (spec.find('/', slash + 1) != std::string_view::npos)
    throw std::invalid_argument("optimizer state format '" + std::string(spec) + "': expected F or M/V");
  return {parse_one(spec.substr(0, slash), spec), parse_one(spec.substr(slash + 1), spec)};
}

std::string state_format_name(const StateFormat& f) {
  if (f.m == f.v) return dtype_format_name(f.m);
  return std::string(dtype_format_name(f.m)) + "/" + dtype_format_name(f.v);
}

bool state_dtype_scaled(DType t) { return t != DType::f32 && t != DType::bf16; }

float state_scale_for(DType t, float amax, float previous) {
  if (!state_dtype_scaled(t)) return 1.0f;
  if (!(amax > 0.0f) || !std::isfinite(amax)) return previous;
  const double max = formats::preset(dtype_format_name(t)).max();
  // Smallest integer e with amax / 2^e <= max.
  int e = static_cast<int>(std::ceil(std::log2(static_cast<double>(amax) / max)));
  while (std::ldexp(max, e) < amax) ++e;  // guard log2 rounding
  while (std::ldexp(max, e - 1) >= amax) --e;
  e = std::max(-126, std::min(e, 127));
  return std::ldexp(1.0f, e);
}

}  // namespace mantissa::optim
