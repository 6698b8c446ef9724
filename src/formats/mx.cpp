// OCP Microscaling (MX v1.0) block quantisation on top of the scalar encoder.
//
// Per block of `block` elements: amax = max |x|; the shared scale is 2^s with
//   floor rule: s = floor(log2(amax)) - emax(element)   (OCP; elements above
//               the element max saturate, hence RoundOptions.saturate = true)
//   ceil rule:  s = smallest integer with amax / 2^s <= max(element)
// s is clipped to E8M0's range [-127, 127]. Choices where OCP leaves room:
// - an all-zero block gets s = -127 (code 0x00); its elements keep their signs;
// - a block holding NaN or +-inf gets the NaN scale 0xFF and element codes 0:
//   it dequantises to NaN in every element, so nothing is silently finite;
// - MXINT8 elements are two's complement with 6 fraction bits (value =
//   code / 64, emax 0); codes are in [-127, 127].
#include "mantissa/formats/mx.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "formats/convert_mx.hpp"

namespace mantissa::formats {

namespace {

constexpr uint8_t kNanScale = 0xff;
constexpr int kScaleBias = 127;
constexpr int kIntFractionBits = 6;  // MXINT8: 1 sign, 1 integer, 6 fraction bits

bool is_int(const Format& f) { return f.kind == Kind::integer; }

int element_emax(const Format& f) { return is_int(f) ? 0 : f.max_exponent(); }

double element_max(const Format& f) { return is_int(f) ? std::ldexp(127.0, -kIntFractionBits) : f.max(); }

void check(const MxConfig& cfg) {
  if (cfg.block < 1) throw std::invalid_argument("MX block size must be >= 1, got " + std::to_string(cfg.block));
  if (cfg.element.kind == Kind::exponent || cfg.element.storage_bytes() > 2)
    throw std::invalid_argument("MX element format must be a float of <= 16 bits or int8, got '" +
                                cfg.element.name + "'");
}

// Exponent of the shared scale for a block with finite amax > 0.
int scale_exponent(const MxConfig& cfg, double amax) {
  int e2 = 0;
  (void)std::frexp(amax, &e2);  // amax in [2^(e2-1), 2^e2)
  int s = (e2 - 1) - element_emax(cfg.element);
  if (cfg.scale_rounding == ScaleRounding::ceil) {
    const double max = element_max(cfg.element);
    while (amax > std::ldexp(max, s)) ++s;
    while (amax <= std::ldexp(max, s - 1)) --s;
  }
  return std::clamp(s, -kScaleBias, kScaleBias);
}

void store(uint8_t* codes, size_t i, int bytes, uint32_t code) {
  codes[i * bytes] = static_cast<uint8_t>(code);
  if (bytes == 2) codes[i * bytes + 1] = static_cast<uint8_t>(code >> 8);
}

uint32_t load(const std::vector<uint8_t>& codes, size_t i, int bytes) {
  return bytes == 2 ? codes[i * 2] | (uint32_t{codes[i * 2 + 1]} << 8) : codes[i];
}

}  // namespace

MxConfig mx_preset(const char* name) {
  const std::string n = name ? name : "";
  MxConfig cfg;
  if (n == "mxfp8_e4m3") cfg.element = preset("e4m3fn");
  else if (n == "mxfp8_e5m2") cfg.element = preset("e5m2");
  else if (n == "mxfp6_e2m3") cfg.element = preset("e2m3fn");
  else if (n == "mxfp6_e3m2") cfg.element = preset("e3m2fn");
  else if (n == "mxfp4") cfg.element = preset("e2m1fn");
  else if (n == "mxint8") cfg.element = preset("int8");
  else
    throw std::invalid_argument("unknown MX format '" + n +
                                "' (valid: mxfp8_e4m3, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4, mxint8)");
  return cfg;
}

void mx_quantize_into(const MxConfig& cfg, const float* in, size_t n, std::span<uint8_t> codes,
                      std::span<uint8_t> scales) {
  check(cfg);
  const int bytes = cfg.element.storage_bytes();
  const size_t block = static_cast<size_t>(cfg.block);
  const size_t blocks = (n + block - 1) / block;
  if (codes.size() != n * bytes)
    throw std::invalid_argument("mx_quantize_into: codes buffer has " + std::to_string(codes.size()) +
                                " bytes, but n = " + std::to_string(n) + " " + cfg.element.name + " codes need " +
                                std::to_string(n * bytes));
  if (scales.size() != blocks)
    throw std::invalid_argument("mx_quantize_into: scales buffer has " + std::to_string(scales.size()) +
                                " bytes, but n = " + std::to_string(n) + " in blocks of " +
                                std::to_string(cfg.block) + " need " + std::to_string(blocks));
  // The AVX-512 kernel gives these same bits (tests compare both paths).
  if (detail::mx_quantize_fast(cfg, in, n, codes.data(), scales.data())) return;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block, end = std::min(n, begin + block);
    double amax = 0;
    bool special = false;
    for (size_t i = begin; i < end; ++i) {
      if (!std::isfinite(in[i])) special = true;
      else amax = std::max(amax, std::fabs(static_cast<double>(in[i])));
    }
    if (special) {
      scales[b] = kNanScale;
      std::fill_n(codes.data() + begin * bytes, (end - begin) * bytes, uint8_t{0});
      continue;
    }
    const int s = amax > 0 ? scale_exponent(cfg, amax) : -kScaleBias;
    scales[b] = static_cast<uint8_t>(s + kScaleBias);
    // Dividing by 2^s in double is exact (fp32 inputs stay far from the
    // double range), so each element is rounded exactly once.
    const int shift = is_int(cfg.element) ? kIntFractionBits - s : -s;
    for (size_t i = begin; i < end; ++i)
      store(codes.data(), i, bytes, encode(cfg.element, std::ldexp(static_cast<double>(in[i]), shift), cfg.round, i));
  }
}

MxArray mx_quantize(const MxConfig& cfg, const float* in, size_t n) {
  check(cfg);
  MxArray a;
  a.n = n;
  a.codes.resize(n * cfg.element.storage_bytes());
  a.scales.resize((n + static_cast<size_t>(cfg.block) - 1) / static_cast<size_t>(cfg.block));
  mx_quantize_into(cfg, in, n, a.codes, a.scales);
  return a;
}

void mx_dequantize(const MxConfig& cfg, const MxArray& a, float* out) {
  check(cfg);
  const int bytes = cfg.element.storage_bytes();
  const size_t block = static_cast<size_t>(cfg.block);
  if (a.codes.size() != a.n * bytes || a.scales.size() != (a.n + block - 1) / block)
    throw std::invalid_argument("MX array sizes do not match n = " + std::to_string(a.n) + " and block " +
                                std::to_string(cfg.block));
  for (size_t i = 0; i < a.n; ++i) {
    const uint8_t scale = a.scales[i / block];
    if (scale == kNanScale) {
      out[i] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const int s = static_cast<int>(scale) - kScaleBias - (is_int(cfg.element) ? kIntFractionBits : 0);
    // One rounding: the exact product in double, then to float.
    out[i] = static_cast<float>(std::ldexp(decode(cfg.element, load(a.codes, i, bytes)), s));
  }
}

}  // namespace mantissa::formats
