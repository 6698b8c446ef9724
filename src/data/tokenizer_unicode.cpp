// Unicode classes for the tokenizer, from ICU (libicu, Unicode 15 in ICU 72),
// with an ASCII table in front: most text is ASCII, and an ICU call per
// character would dominate the time.
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/uset.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

#include "data/tokenizer_impl.hpp"

namespace mantissa::data::tok {

namespace {

// Unicode 8.0 and earlier: the unicode_categories crate's tables (see the header).
bool assigned_by_unicode_8(char32_t c) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  return age[0] <= 8;
}

// Characters whose general category changed after Unicode 8.0, with the
// category the Unicode 8.0 tables still give them (found comparing every code
// point with `tokenizers`; tests/python/test_tokenize.py checks them all).
bool was_punctuation_in_8(char32_t c) { return c == 0x166D || c == 0x111C9; }  // now So, Mn
bool was_mn_in_8(char32_t c) { return c == 0x1734; }  // now Mc
bool was_not_mn_in_8(char32_t c) {                     // Lo, Lo, Mc, Po then
  return c == 0x1885 || c == 0x1886 || c == 0xA9BD || c == 0x111C9;
}

bool is_ascii_punctuation(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

Gpt2Class icu_gpt2_class(char32_t c) {
  if (u_isUWhiteSpace(static_cast<UChar32>(c))) return Gpt2Class::space;
  const int32_t mask = U_MASK(u_charType(static_cast<UChar32>(c)));
  if (mask & U_GC_L_MASK) return Gpt2Class::letter;
  if (mask & U_GC_N_MASK) return Gpt2Class::number;
  return Gpt2Class::other;
}

const std::array<Gpt2Class, 128>& ascii_classes() {
  static const std::array<Gpt2Class, 128> table = [] {
    std::array<Gpt2Class, 128> t{};
    for (char32_t c = 0; c < 128; ++c) t[c] = icu_gpt2_class(c);
    return t;
  }();
  return table;
}

// ICU status to an exception: the NFD instance is built into libicuuc.
void check(UErrorCode status, const char* what) {
  if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU ") + what + ": " + u_errorName(status));
}

}  // namespace

Gpt2Class gpt2_class(char32_t c) { return c < 128 ? ascii_classes()[c] : icu_gpt2_class(c); }

bool is_space(char32_t c) {
  if (c < 128) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return u_isUWhiteSpace(static_cast<UChar32>(c));
}

bool is_bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  if (c < 128) return c < 0x20 || c == 0x7F;
  const int32_t mask = U_MASK(u_charType(static_cast<UChar32>(c)));
  return (mask & (U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CO_MASK | U_GC_CS_MASK)) && assigned_by_unicode_8(c);
}

bool is_bert_punctuation(char32_t c) {
  if (c < 128) return is_ascii_punctuation(c);
  if (was_punctuation_in_8(c)) return true;
  return (U_MASK(u_charType(static_cast<UChar32>(c))) & U_GC_P_MASK) && assigned_by_unicode_8(c);
}

bool is_chinese(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_word_char(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  const int32_t mask = U_MASK(u_charType(u));
  return u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
         u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL);
}

void append_lower(std::string& out, char32_t c) {
  if (c < 128) {
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  } else if (c == 0x130) {  // the one unconditional multi-character lowercase mapping
    out += 'i';
    append_utf8(out, 0x307);
  } else {
    append_utf8(out, static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))));
  }
}

namespace {

// NFD without the decompositions `tokenizers`' normalization data lacks
// (U+11938, added in Unicode 13.0, is the one ICU 72 knows).
const UNormalizer2* nfd_as_tokenizers() {
  static const UNormalizer2* filtered = [] {
    UErrorCode status = U_ZERO_ERROR;
    const UNormalizer2* nfd = unorm2_getNFDInstance(&status);
    check(status, "NFD instance");
    USet* set = uset_open(0, 0x10FFFF);
    uset_remove(set, 0x11938);
    uset_freeze(set);  // lives as long as the process, as the normalizer does
    const UNormalizer2* f = unorm2_openFiltered(nfd, set, &status);
    check(status, "filtered NFD");
    return f;
  }();
  return filtered;
}

// NFD of one chunk (at most 2^26 bytes), marks dropped, appended to out.
void strip_accents_chunk(std::string_view s, bool lower, std::string& out) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* nfd = nfd_as_tokenizers();
  std::u16string in(s.size(), u'\0');  // UTF-16 never has more units than UTF-8 has bytes
  int32_t in_len = 0;
  u_strFromUTF8(reinterpret_cast<UChar*>(in.data()), static_cast<int32_t>(in.size()), &in_len, s.data(),
                static_cast<int32_t>(s.size()), &status);
  check(status, "UTF-8 to UTF-16");
  // Twice the units is enough for nearly all text; ICU says how many when not.
  std::u16string nf(static_cast<size_t>(in_len) * 2 + 16, u'\0');
  int32_t nf_len = unorm2_normalize(nfd, reinterpret_cast<const UChar*>(in.data()), in_len,
                                    reinterpret_cast<UChar*>(nf.data()), static_cast<int32_t>(nf.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    status = U_ZERO_ERROR;
    nf.assign(static_cast<size_t>(nf_len), u'\0');
    nf_len = unorm2_normalize(nfd, reinterpret_cast<const UChar*>(in.data()), in_len,
                              reinterpret_cast<UChar*>(nf.data()), nf_len, &status);
  }
  check(status, "NFD");
  for (int32_t i = 0; i < nf_len;) {
    UChar32 c;
    U16_NEXT(nf.data(), i, nf_len, c);
    const auto cp = static_cast<char32_t>(c);
    const bool mark = u_charType(c) == U_NON_SPACING_MARK && assigned_by_unicode_8(cp) && !was_not_mn_in_8(cp);
    if (mark || was_mn_in_8(cp)) continue;
    if (lower)
      append_lower(out, static_cast<char32_t>(c));
    else
      append_utf8(out, static_cast<char32_t>(c));
  }
}

}  // namespace

void strip_accents(std::string_view s, bool lower, std::string& out) {
  // Chunks end before an ASCII byte: ASCII characters are starters that NFD
  // neither decomposes nor reorders across, so chunks normalize independently.
  constexpr size_t kChunk = size_t{1} << 24, kMaxChunk = size_t{1} << 26;
  size_t first = 0;
  while (first < s.size()) {
    size_t end = std::min(s.size(), first + kChunk);
    while (end < s.size() && static_cast<unsigned char>(s[end]) >= 0x80 && end - first < kMaxChunk) ++end;
    if (end < s.size() && static_cast<unsigned char>(s[end]) >= 0x80)
      throw std::invalid_argument("text: more than 64 MiB without an ASCII character (too long to normalize)");
    const std::string_view chunk = s.substr(first, end - first);
    bool ascii = true;
    for (char ch : chunk) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
    if (ascii) {  // NFD leaves ASCII alone, and it has no marks
      for (char ch : chunk) lower ? append_lower(out, static_cast<unsigned char>(ch)) : void(out += ch);
    } else {
      strip_accents_chunk(chunk, lower, out);
    }
    first = end;
  }
}

const std::string& byte_char(unsigned char b) {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    char32_t next = 256;
    for (int v = 0; v < 256; ++v) {
      const bool printable = (v >= '!' && v <= '~') || (v >= 0xA1 && v <= 0xAC) || (v >= 0xAE && v <= 0xFF);
      append_utf8(t[static_cast<size_t>(v)], printable ? static_cast<char32_t>(v) : next++);
    }
    return t;
  }();
  return table[b];
}

}  // namespace mantissa::data::tok
