// What the bindings of formats.cpp and fast.cpp share: formats and rounding
// options parsed from their Python spellings, and the code-range check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"

namespace mantissa::py {

namespace mf = mantissa::formats;

using FormatPtr = std::shared_ptr<const mf::Format>;

// A preset or eXmY[:...] spec, parsed once (ValueError naming "format"); the
// cache of parsed specs is bounded.
FormatPtr format_of(const std::string& spec);
size_t format_cache_size();
// ValueError naming "round" or random_bits for a bad value.
mf::RoundOptions round_options(const std::string& round, bool saturate, bool flush, uint64_t seed, int random_bits);
// ValueError if one of the n one-byte codes (packed: either nibble) is beyond
// the last code of a format of fewer than 8 (4) bits.
void check_code_range(const uint8_t* codes, size_t n, const mf::Format& f, bool packed);

}  // namespace mantissa::py
