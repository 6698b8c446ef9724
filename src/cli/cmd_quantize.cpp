// `mantissa quantize --format NAME [--round MODE] [--seed N] [--saturate]`:
// one number per stdin line -> "0x<code> <decoded value as %a>". The whole
// output is built first, so a bad line leaves nothing half-written.
//
// Input: decimal, C99 hex float, nan, inf, -inf. A decimal that is not exactly
// a double is read as the nearest double (strtod) before it is encoded.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.hpp"
#include "mantissa/formats/parse_number.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/io/untrusted.hpp"

namespace mantissa::cli {
namespace {

namespace mf = mantissa::formats;

struct QuantizeArgs {
  std::string format;
  std::string round = "nearest-even";
  uint64_t seed = 0;
  int random_bits = 16;
  bool saturate = false;
  bool flush = false;
};

std::string format_value(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

void quantize_command(const QuantizeArgs& a) {
  mf::Format f;
  try {
    f = mf::parse_format(a.format);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--format: ") + e.what());
  }
  mf::RoundOptions opt;
  try {
    opt.mode = mf::parse_round(a.round);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--round: ") + e.what());
  }
  if (a.random_bits < 1 || a.random_bits > 32)
    throw UsageError("--random-bits must be 1..32, got " + std::to_string(a.random_bits));
  opt.saturate = a.saturate;
  opt.flush_subnormals = a.flush;
  opt.seed = a.seed;
  opt.random_bits = a.random_bits;
  const int hex_digits = 2 * f.storage_bytes();
  std::string out, line;
  uint64_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    const std::string_view text = mf::trim_blanks(line);
    double x = 0;
    if (!mf::parse_number(text, x))
      throw UsageError("stdin line " + std::to_string(line_no) + ": cannot read '" + io::excerpt(text) +
                       "' as a number (decimal, hex float like 0x1.8p+3, nan, inf, -inf)");
    const uint32_t code = mf::encode(f, x, opt, line_no - 1);
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%0*x ", hex_digits, code);
    out += buf;
    out += format_value(mf::decode(f, code));
    out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

Registrar reg(11, [](CLI::App& app) {
  auto* cmd = app.add_subcommand("quantize", "round numbers from stdin (one per line) into a format");
  auto args = std::make_shared<QuantizeArgs>();
  cmd->add_option("--format,-f", args->format, "preset name or eXmY[:option=value...]")->required();
  cmd->add_option("--round,-r", args->round,
                  "nearest-even (default), nearest-away, toward-zero, up, down, stochastic");
  cmd->add_option("--seed", args->seed, "stochastic rounding seed (line i uses draw i)")->check(exact_integer<uint64_t>());
  cmd->add_option("--random-bits", args->random_bits, "stochastic rounding: random bits compared (1..32)")
      ->check(exact_integer<int>());
  cmd->add_flag("--saturate", args->saturate, "clamp overflow to +-max instead of inf/NaN");
  cmd->add_flag("--flush-subnormals", args->flush, "results below the min normal become +-0");
  cmd->callback([args] { quantize_command(*args); });
});

}  // namespace
}  // namespace mantissa::cli
