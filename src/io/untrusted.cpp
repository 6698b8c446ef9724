#include "mantissa/io/untrusted.hpp"

#include "mantissa/io/files.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace mantissa::io {

using nlohmann::json;

std::string read_bounded(const std::string& path, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::invalid_argument("cannot open '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw std::invalid_argument("'" + path + "' is not a regular file" + (S_ISDIR(st.st_mode) ? " (a directory)" : ""));
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    throw std::invalid_argument("'" + path + "' has " + std::to_string(st.st_size) + " bytes, more than the " +
                                std::to_string(max_bytes) + " accepted");
  std::string bytes = read_file(path);
  if (bytes.size() > max_bytes)  // grew while being read
    throw std::invalid_argument("'" + path + "' grew beyond " + std::to_string(max_bytes) + " bytes while being read");
  return bytes;
}

json parse_json(std::string_view text, const std::string& what) {
  // The parser itself is iterative; the callback sees each container's depth
  // as it opens, before anything deeper is built.
  bool too_deep = false;
  const json::parser_callback_t limit = [&too_deep](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth) {
      too_deep = true;
      throw std::invalid_argument("too deep");
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), limit);
  } catch (const json::exception& e) {
    throw std::invalid_argument(what + ": not valid JSON (" + excerpt(std::string_view(e.what())) + ")");
  } catch (const std::invalid_argument&) {
    if (!too_deep) throw;
    throw std::invalid_argument(what + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
}

namespace {
// Length of the well-formed UTF-8 sequence starting at s[i], or 0.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const unsigned b0 = at(0);
  if (b0 < 0x80) return 1;
  // The second byte's range excludes overlong forms, surrogates and > U+10FFFF.
  unsigned lo = 0x80, hi = 0xbf;
  size_t n;
  if (b0 >= 0xc2 && b0 <= 0xdf) n = 2;
  else if (b0 >= 0xe0 && b0 <= 0xef) n = 3, lo = b0 == 0xe0 ? 0xa0 : 0x80, hi = b0 == 0xed ? 0x9f : 0xbf;
  else if (b0 >= 0xf0 && b0 <= 0xf4) n = 4, lo = b0 == 0xf0 ? 0x90 : 0x80, hi = b0 == 0xf4 ? 0x8f : 0xbf;
  else return 0;
  if (at(1) < lo || at(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (at(k) < 0x80 || at(k) > 0xbf) return 0;
  return n;
}
}  // namespace

void require_utf8(std::string_view s, const std::string& what) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i);
    if (n == 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "byte 0x%02X at offset %zu", static_cast<unsigned char>(s[i]), i);
      throw std::invalid_argument(what + ": not valid UTF-8 (" + buf + ": '" + excerpt(s) + "')");
    }
    i += n;
  }
}

std::string excerpt(std::string_view s) {
  std::string out;
  size_t i = 0;
  for (; i < s.size() && out.size() < kMaxQuoted; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (i < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

namespace {
// Compact JSON text of v, stopping once out holds more than kMaxQuoted chars.
void bounded_dump(const json& v, int depth, std::string& out) {
  if (out.size() > kMaxQuoted) return;
  if (depth >= kMaxJsonDepth) {
    out += "...";
    return;
  }
  if (v.is_array() || v.is_object()) {
    out += v.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= kMaxQuoted; ++it) {
      if (!first) out += ',';
      first = false;
      if (v.is_object()) out += json(it.key()).dump() + ':';
      bounded_dump(it.value(), depth + 1, out);
    }
    out += v.is_array() ? ']' : '}';
  } else {
    out += v.dump();
  }
}
}  // namespace

int64_t as_integer(const nlohmann::json& v, const std::string& what) {
  if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX)) return v.get<int64_t>();
  throw std::invalid_argument(what + " must be an integer below 2^63 (got " + excerpt_json(v) + ")");
}

int64_t integer_or(const nlohmann::json& j, const std::string& key, int64_t fallback, const std::string& what) {
  if (!j.is_object() || !j.contains(key)) return fallback;
  return as_integer(j[key], what + ": '" + key + "'");
}

std::string string_or_empty(const json& j, const std::string& key) {
  if (!j.is_object()) return "";
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string excerpt_json(const json& value) {
  std::string text;
  bounded_dump(value, 0, text);
  return excerpt(std::string_view(text));
}

}  // namespace mantissa::io
