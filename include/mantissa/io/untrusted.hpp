// Reading what came from outside (files, flags): JSON parsed with a bound on
// nesting depth (nlohmann's dump() and comparisons recurse, so a deeply nested
// value would overflow the stack), and excerpts of bad input short enough to
// put into an error message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace mantissa::io {

// Deepest nesting of arrays/objects accepted in any JSON mantissa reads.
inline constexpr int kMaxJsonDepth = 64;
// Longest excerpt of bad input quoted in a message.
inline constexpr size_t kMaxQuoted = 80;

// The bytes of a regular file of at most max_bytes; throws
// std::invalid_argument naming the path if it is missing, not a regular file
// (a directory, /dev/zero, a FIFO) or larger.
std::string read_bounded(const std::string& path, uint64_t max_bytes);

// Parses text as JSON; throws std::invalid_argument "<what>: not valid JSON
// (...)" or "<what>: nested deeper than 64 levels".
nlohmann::json parse_json(std::string_view text, const std::string& what);

// The string at key when j is an object holding a string there, otherwise
// "" (nlohmann's value(key, "") throws on a non-string, which untrusted
// input must never reach).
std::string string_or_empty(const nlohmann::json& j, const std::string& key);

// v as an int64: throws std::invalid_argument "<what> must be an integer
// (got ...)" for a non-integer (a float such as 1e93 would be undefined
// behaviour to convert) or one outside int64's range.
int64_t as_integer(const nlohmann::json& v, const std::string& what);
// j[key] as_integer, or fallback when j has no such key.
int64_t integer_or(const nlohmann::json& j, const std::string& key, int64_t fallback, const std::string& what);

// Throws std::invalid_argument "<what>: not valid UTF-8 (byte 0xNN at offset
// K)" unless s is well-formed UTF-8 (no overlong forms, surrogates or code
// points above U+10FFFF). Everything mantissa writes into JSON (run records,
// checkpoints, recipes) must pass, so it is checked where text comes in.
void require_utf8(std::string_view s, const std::string& what);

// At most kMaxQuoted characters of s, control and non-ASCII bytes escaped as
// \xNN, with "... (N bytes)" appended when cut.
std::string excerpt(std::string_view s);
// A JSON value as text for a message: compact, at most kMaxQuoted characters
// (never recursing deeper than kMaxJsonDepth).
std::string excerpt_json(const nlohmann::json& value);

}  // namespace mantissa::io
