// `mantissa quantize`: the first line is a --format spec, the rest numbers
// (one per line) read, encoded and decoded as the command does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/parse_number.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/io/untrusted.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace mf = mantissa::formats;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  const std::string_view spec = in.substr(0, nl);
  in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
  mf::Format f;
  try {
    f = mf::parse_format(spec);
  } catch (const std::invalid_argument&) {
    f = mf::preset("e4m3fn");
  }
  mf::RoundOptions opt;
  opt.mode = static_cast<mf::Round>(size % 6);
  opt.saturate = (size & 4) != 0;
  uint64_t index = 0;
  while (!in.empty()) {
    const size_t end = in.find('\n');
    const std::string_view line = mf::trim_blanks(in.substr(0, end));
    in = end == std::string_view::npos ? std::string_view() : in.substr(end + 1);
    double x = 0;
    if (!mf::parse_number(line, x)) {
      (void)mantissa::io::excerpt(line);  // what the error message quotes
      continue;
    }
    const uint32_t code = mf::encode(f, x, opt, index++);
    (void)mf::decode(f, code);
  }
  return 0;
}
