// `mantissa formats [--json] [--format SPEC ...]`: every preset (or the named
// presets and user-defined eXmY formats) with its exact properties.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "mantissa/formats/format.hpp"

namespace mantissa::cli {
namespace {

namespace mf = mantissa::formats;

bool has_subnormals(const mf::Format& f) {
  return f.kind == mf::Kind::floating && f.subnormals && f.mantissa_bits > 0;
}

// Powers of two as 2^k (always for the min normal / min subnormal columns,
// for max only when decimals get long), other values with enough digits to
// tell neighbours apart.
std::string pretty(double v, bool pow2_always = false) {
  char buf[64];
  int e = 0;
  if (v > 0 && std::frexp(v, &e) == 0.5 && (pow2_always || e - 1 < -3 || e - 1 > 16)) {
    std::snprintf(buf, sizeof buf, "2^%d", e - 1);
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  return buf;
}

const char* kind_name(mf::Kind k) {
  switch (k) {
    case mf::Kind::floating: return "float";
    case mf::Kind::integer: return "integer";
    case mf::Kind::exponent: return "exponent";
  }
  return "float";
}

std::string table(const std::vector<mf::Format>& formats) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-13s %4s %3s %3s %5s %5s %5s  %-14s %-11s %-13s %-3s %-4s %-3s %s\n", "format",
                "bits", "E", "M", "bias", "emax", "emin", "max", "min normal", "min subnormal", "inf", "nan", "-0",
                "bytes");
  out += line;
  for (const auto& f : formats) {
    std::snprintf(line, sizeof line, "%-13s %4d %3d %3d %5d %5d %5d  %-14s %-11s %-13s %-3s %-4s %-3s %d\n",
                  f.name.c_str(), f.total_bits(), f.exponent_bits, f.mantissa_bits, f.bias, f.max_exponent(),
                  f.min_exponent(), pretty(f.max()).c_str(), pretty(f.min_normal(), true).c_str(),
                  has_subnormals(f) ? pretty(f.min_subnormal(), true).c_str() : "none", f.has_inf ? "yes" : "no",
                  f.nan_name(), f.negative_zero ? "yes" : "no", f.storage_bytes());
    out += line;
  }
  out +=
      "\nnan: ieee = exponent all ones, mantissa non-zero; fn = only S.1...1; fnuz = only 0x80 (no -0); "
      "none = no NaN (saturates).\nint8 is the integer grid [-127, 127]; e8m0 is unsigned powers of two "
      "(0xFF = NaN, no zero). User formats: eXmY[:bias=N][:inf=0|1][:nan=ieee|fn|fnuz|none][:negzero=0|1]"
      "[:subnormals=0|1]\n";
  return out;
}

std::string json(const std::vector<mf::Format>& formats) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& f : formats) {
    nlohmann::json j;
    j["name"] = f.name;
    j["kind"] = kind_name(f.kind);
    j["exponent_bits"] = f.exponent_bits;
    j["mantissa_bits"] = f.mantissa_bits;
    j["total_bits"] = f.total_bits();
    j["storage_bytes"] = f.storage_bytes();
    j["bias"] = f.bias;
    j["max_exponent"] = f.max_exponent();
    j["min_exponent"] = f.min_exponent();
    j["max"] = f.max();
    j["min_normal"] = f.min_normal();
    j["min_subnormal"] = has_subnormals(f) ? nlohmann::json(f.min_subnormal()) : nlohmann::json(nullptr);
    j["epsilon"] = f.epsilon();
    j["has_inf"] = f.has_inf;
    j["nan"] = f.nan_name();
    j["negative_zero"] = f.negative_zero;
    j["subnormals"] = has_subnormals(f);
    j["signed"] = f.is_signed;
    arr.push_back(std::move(j));
  }
  return arr.dump(2) + "\n";
}

Registrar reg(10, [](CLI::App& app) {
  auto* cmd = app.add_subcommand("formats", "list the number formats with their exact properties");
  auto json_flag = std::make_shared<bool>(false);
  auto specs = std::make_shared<std::vector<std::string>>();
  cmd->add_flag("--json", *json_flag, "print a JSON array instead of a table");
  cmd->add_option("--format,-f", *specs, "only these presets or user-defined eXmY[:option=value...] formats");
  cmd->callback([json_flag, specs] {
    std::vector<mf::Format> formats;
    if (specs->empty()) {
      for (const auto& f : mf::presets()) formats.push_back(f);
    } else {
      for (const auto& s : *specs) {
        try {
          formats.push_back(mf::parse_format(s));
        } catch (const std::invalid_argument& e) {
          throw UsageError(std::string("--format: ") + e.what());
        }
      }
    }
    const std::string out = *json_flag ? json(formats) : table(formats);
    std::fwrite(out.data(), 1, out.size(), stdout);
  });
});

}  // namespace
}  // namespace mantissa::cli
