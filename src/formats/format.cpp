// Format descriptors: the presets (IEEE, OCP OFP8 and MX, fnuz), derived properties, and
// the parser for user-defined "eXmY[:option=value...]" formats.
#include "mantissa/formats/format.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "formats/layout_internal.hpp"

namespace mantissa::formats {

namespace {

Format make(const char* name, int e, int m, int bias, bool inf, NanEncoding nan, bool negzero = true) {
  Format f;
  f.name = name;
  f.exponent_bits = e;
  f.mantissa_bits = m;
  f.bias = bias;
  f.has_inf = inf;
  f.nan = nan;
  f.negative_zero = negzero;
  return f;
}

std::vector<Format> build_presets() {
  using N = NanEncoding;
  std::vector<Format> p;
  p.push_back(make("fp32", 8, 23, 127, true, N::ieee));
  p.push_back(make("tf32", 8, 10, 127, true, N::ieee));
  p.push_back(make("bf16", 8, 7, 127, true, N::ieee));
  p.push_back(make("fp16", 5, 10, 15, true, N::ieee));
  p.push_back(make("e5m2", 5, 2, 15, true, N::ieee));
  p.push_back(make("e5m2fnuz", 5, 2, 16, false, N::fnuz, false));
  p.push_back(make("e4m3fn", 4, 3, 7, false, N::fn));
  p.push_back(make("e4m3fnuz", 4, 3, 8, false, N::fnuz, false));
  p.push_back(make("e4m3", 4, 3, 7, true, N::ieee));
  p.push_back(make("e4m3b11fnuz", 4, 3, 11, false, N::fnuz, false));
  p.push_back(make("e3m4", 3, 4, 3, true, N::ieee));
  Format e8m0 = make("e8m0", 8, 0, 127, false, N::fn, false);
  e8m0.kind = Kind::exponent;
  e8m0.is_signed = false;
  e8m0.subnormals = false;
  p.push_back(e8m0);
  p.push_back(make("e2m3fn", 2, 3, 1, false, N::none));
  p.push_back(make("e3m2fn", 3, 2, 3, false, N::none));
  p.push_back(make("e2m1fn", 2, 1, 1, false, N::none));
  Format int8 = make("int8", 0, 7, 0, false, N::none, false);
  int8.kind = Kind::integer;
  int8.subnormals = false;
  p.push_back(int8);
  return p;
}

[[noreturn]] void bad_spec(std::string_view spec, const std::string& why) {
  throw std::invalid_argument("format '" + std::string(spec) + "': " + why + " (presets: " + preset_names() +
                              "; or eXmY[:bias=N][:inf=0|1][:nan=ieee|fn|fnuz|none][:negzero=0|1][:subnormals=0|1])");
}

bool parse_int(std::string_view text, int& out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end;
}

bool parse_bool(std::string_view text, bool& out) {
  if (text == "1" || text == "true") return out = true, true;
  if (text == "0" || text == "false") return out = false, true;
  return false;
}

// "eXmY" -> (X, Y); false if the head is not of that shape.
bool parse_exmy(std::string_view head, int& e, int& m) {
  if (head.size() < 4 || head[0] != 'e') return false;
  const size_t mpos = head.find('m');
  if (mpos == std::string_view::npos) return false;
  return parse_int(head.substr(1, mpos - 1), e) && parse_int(head.substr(mpos + 1), m);
}

// Rejects descriptors the encoder cannot honour exactly: codes must fit 32
// bits and every value (down to the min subnormal) must be a finite double.
void validate(std::string_view spec, const Format& f) {
  if (f.kind != Kind::floating) return;
  if (f.exponent_bits < 1 || f.exponent_bits > 11) bad_spec(spec, "exponent bits must be 1..11");
  // Ranges first, so the sums below cannot overflow.
  if (f.mantissa_bits < 0 || f.mantissa_bits > 31 || f.exponent_bits + f.mantissa_bits > 31)
    bad_spec(spec, "mantissa bits must be >= 0 with exponent + mantissa bits <= 31");
  if (f.has_inf && f.nan != NanEncoding::ieee) bad_spec(spec, "inf=1 needs nan=ieee");
  if (f.nan == NanEncoding::fnuz && f.negative_zero) bad_spec(spec, "nan=fnuz uses the -0 code, so negzero must be 0");
  if (f.nan == NanEncoding::ieee && f.has_inf && f.mantissa_bits == 0)
    bad_spec(spec, "with 0 mantissa bits the top exponent is inf, leaving no IEEE NaN code (use inf=0)");
  if (f.nan == NanEncoding::fn && f.mantissa_bits == 0 && f.exponent_bits == 1)
    bad_spec(spec, "nan=fn leaves no finite non-zero value");
  // Any bias beyond +-4096 puts values outside the double range anyway; the
  // bound keeps layout_of's exponent arithmetic from overflowing an int.
  if (f.bias < -4096 || f.bias > 4096) bad_spec(spec, "bias must be in [-4096, 4096]");
  const auto l = detail::layout_of(f);
  if (l.emax < l.emin) bad_spec(spec, "no normal values left after reserving inf/NaN codes");
  if (l.emax > 1023 || l.emin - f.mantissa_bits < -1074) bad_spec(spec, "bias puts values outside the double range");
}

void apply_option(std::string_view spec, Format& f, std::string_view opt, bool& inf_given, bool& negzero_given,
                  bool& bias_given) {
  const size_t eq = opt.find('=');
  if (eq == std::string_view::npos) bad_spec(spec, "option '" + std::string(opt) + "' is not key=value");
  const std::string_view key = opt.substr(0, eq), value = opt.substr(eq + 1);
  bool ok = true;
  if (key == "bias") {
    ok = parse_int(value, f.bias);
    bias_given = true;
  } else if (key == "inf") {
    ok = parse_bool(value, f.has_inf);
    inf_given = true;
  } else if (key == "negzero") {
    ok = parse_bool(value, f.negative_zero);
    negzero_given = true;
  } else if (key == "subnormals") {
    ok = parse_bool(value, f.subnormals);
  } else if (key == "nan") {
    if (value == "ieee") f.nan = NanEncoding::ieee;
    else if (value == "fn") f.nan = NanEncoding::fn;
    else if (value == "fnuz") f.nan = NanEncoding::fnuz;
    else if (value == "none") f.nan = NanEncoding::none;
    else ok = false;
  } else {
    bad_spec(spec, "unknown option '" + std::string(key) + "'");
  }
  if (!ok) bad_spec(spec, "bad value '" + std::string(value) + "' for option '" + std::string(key) + "'");
}

}  // namespace

int Format::total_bits() const { return (is_signed ? 1 : 0) + exponent_bits + mantissa_bits; }

int Format::storage_bytes() const {
  const int bits = total_bits();
  return bits <= 8 ? 1 : bits <= 16 ? 2 : 4;
}

int Format::packed_shift() const { return storage_bytes() == 4 ? 32 - total_bits() : 0; }

uint64_t Format::code_count() const { return uint64_t{1} << total_bits(); }

int Format::max_exponent() const { return detail::layout_of(*this).emax; }

int Format::min_exponent() const { return detail::layout_of(*this).emin; }

double Format::max() const {
  if (kind == Kind::integer) return 127.0;
  const auto l = detail::layout_of(*this);
  const uint32_t man = l.max_mag & ((uint32_t{1} << mantissa_bits) - 1);
  // (2^M + man) * 2^(emax - M): exact in a double for every valid format.
  return std::ldexp(static_cast<double>((uint64_t{1} << mantissa_bits) + man), l.emax - mantissa_bits);
}

double Format::min_normal() const { return kind == Kind::integer ? 1.0 : std::ldexp(1.0, min_exponent()); }

double Format::min_subnormal() const {
  if (kind != Kind::floating || !subnormals || mantissa_bits == 0) return min_normal();
  return std::ldexp(1.0, min_exponent() - mantissa_bits);
}

double Format::epsilon() const { return kind == Kind::integer ? 1.0 : std::ldexp(1.0, -mantissa_bits); }

const char* Format::nan_name() const {
  switch (nan) {
    case NanEncoding::ieee: return "ieee";
    case NanEncoding::fn: return "fn";
    case NanEncoding::fnuz: return "fnuz";
    case NanEncoding::none: return "none";
  }
  return "none";
}

std::span<const Format> presets() {
  static const std::vector<Format> all = build_presets();
  return all;
}

std::string preset_names() {
  std::string out;
  for (const auto& f : presets()) {
    if (!out.empty()) out += ", ";
    out += f.name;
  }
  return out;
}

const Format& preset(std::string_view name) {
  for (const auto& f : presets())
    if (f.name == name) return f;
  throw std::invalid_argument("unknown format '" + std::string(name) + "' (valid: " + preset_names() + ")");
}

Format parse_format(std::string_view spec) {
  const size_t colon = spec.find(':');
  const std::string_view head = spec.substr(0, colon);
  Format f;
  int e = 0, m = 0;
  // A plain eXmY head (e4m3, e5m2, e3m4 are presets too, with the same
  // fields) takes the user-format defaults; other preset heads start from
  // the preset.
  const bool exmy = parse_exmy(head, e, m);
  bool from_preset = false;
  for (const auto& p : presets())
    if (p.name == head) f = p, from_preset = !exmy;
  if (colon == std::string_view::npos && (from_preset || exmy) && f.name == head) return f;
  if (!from_preset) {
    if (!exmy) bad_spec(spec, "unknown format '" + std::string(head) + "'");
    if (e < 1 || e > 11) bad_spec(spec, "exponent bits must be 1..11");
    f = make("", e, m, (1 << (e - 1)) - 1, true, NanEncoding::ieee);
  }
  if (f.kind != Kind::floating && colon != std::string_view::npos)
    bad_spec(spec, "options apply to floating formats only");
  bool inf_given = false, negzero_given = false, bias_given = false;
  std::string_view rest = colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);
  while (!rest.empty()) {
    const size_t next = rest.find(':');
    apply_option(spec, f, rest.substr(0, next), inf_given, negzero_given, bias_given);
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next + 1);
  }
  if (!from_preset) {
    if (!inf_given && f.nan != NanEncoding::ieee) f.has_inf = false;
    if (!negzero_given && f.nan == NanEncoding::fnuz) f.negative_zero = false;
    if (!bias_given && f.nan == NanEncoding::fnuz) f.bias = 1 << (e - 1);
  }
  f.name = std::string(spec);
  validate(spec, f);
  return f;
}

}  // namespace mantissa::formats
