// Reading outside input: JSON nesting is bounded, excerpts of bad input are
// short and printable, safetensors scales must be finite and positive, and a
// corrupt header length never puts raw bytes into a message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mantissa/io/safetensors.hpp"
#include "mantissa/io/untrusted.hpp"
#include "mantissa/nn/gpt.hpp"

namespace {

using namespace mantissa;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

bool printable(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x7f) return false;
  return true;
}

TEST(Untrusted, JsonDepthIsBoundedAt64) {
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_EQ(io::parse_json(nested(64), "x").dump(), nested(64));  // 64 levels: accepted, exactly
  EXPECT_EQ(error_of([&] { io::parse_json(nested(65), "x"); }), "x: JSON nested deeper than 64 levels");
  EXPECT_EQ(error_of([&] { io::parse_json(nested(100000), "cfg"); }), "cfg: JSON nested deeper than 64 levels");
  EXPECT_EQ(error_of([&] { io::parse_json("{\"a\":" + nested(70) + "}", "o"); }), "o: JSON nested deeper than 64 levels");
  const std::string bad = error_of([&] { io::parse_json("{\"a\": tru\x01\xff}", "f"); });
  EXPECT_EQ(bad.rfind("f: not valid JSON (", 0), 0u) << bad;
  EXPECT_TRUE(printable(bad)) << bad;
}

TEST(Untrusted, ExcerptsAreShortAndEscaped) {
  EXPECT_EQ(io::excerpt(std::string_view("abc")), "abc");
  EXPECT_EQ(io::excerpt(std::string_view("a\nb\xff", 4)), "a\\x0ab\\xff");
  const std::string long_text(1000, 'z');
  EXPECT_EQ(io::excerpt(long_text), std::string(80, 'z') + "... (1000 bytes)");
  const auto deep = io::parse_json(std::string(60, '[') + "1" + std::string(60, ']'), "x");
  const std::string e = io::excerpt_json(deep);
  EXPECT_EQ(e.substr(0, 80), std::string(60, '[') + "1" + std::string(19, ']'));
  EXPECT_EQ(io::excerpt_json(nlohmann::json{{"k", 1}}), "{\"k\":1}");
}

// nlohmann's strict dump() is the reference: require_utf8 must accept exactly
// the strings it can write, or a run would fail at its first JSON record.
bool nlohmann_writes(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

bool accepted(const std::string& s) { return error_of([&] { io::require_utf8(s, "x"); }) == "(no error)"; }

TEST(Untrusted, Utf8CheckAgreesWithTheJsonWriter) {
  std::vector<std::string> cases;
  for (int a = 0; a < 256; ++a) {
    cases.emplace_back(1, static_cast<char>(a));
    for (int b = 0; b < 256; ++b) cases.push_back({static_cast<char>(a), static_cast<char>(b)});
  }
  // Three-byte forms at every lead byte that bounds a range (overlong,
  // surrogates, the top of the BMP), every second and third byte.
  for (int a : {0xE0, 0xE1, 0xED, 0xEF})
    for (int b = 0; b < 256; ++b)
      for (int c = 0; c < 256; ++c) cases.push_back({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
  // Four-byte forms: every lead from 0xF0, every second byte, continuation
  // bytes at the edges of their range.
  for (int a = 0xF0; a < 0x100; ++a)
    for (int b = 0; b < 256; ++b)
      for (int c : {0x7F, 0x80, 0xBF, 0xC0})
        for (int d : {0x7F, 0x80, 0xBF, 0xC0})
          cases.push_back({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c), static_cast<char>(d)});
  size_t valid = 0;
  for (const std::string& s : cases) {
    const bool ok = accepted(s);
    valid += ok;
    ASSERT_EQ(ok, nlohmann_writes(s)) << io::excerpt(s);
    ASSERT_EQ(ok, accepted("ok " + s + " ok")) << io::excerpt(s);
  }
  // Well-formed among them: 128 bytes; 128*128 ASCII pairs and 30*64
  // two-byte forms (lead C2-DF); three-byte forms with E0 and ED (32*64
  // each: second byte A0-BF, 80-9F) and E1, EF (64*64 each); four-byte
  // forms with leads F0 (48 second bytes), F1-F3 (64), F4 (16), times the 4
  // of 16 continuation pairs that are in range.
  EXPECT_EQ(valid, 128u + 128u * 128u + 30u * 64u + 2u * 32u * 64u + 2u * 64u * 64u + (48u + 3u * 64u + 16u) * 4u);
}

TEST(Untrusted, Utf8ErrorNamesTheSettingAndTheByte) {
  EXPECT_NO_THROW(io::require_utf8("na\xc3\xafve \xe2\x82\xac \xf0\x9f\x99\x82", "--save"));
  EXPECT_EQ(error_of([] { io::require_utf8("run\xff" "1", "--save"); }),
            "--save: not valid UTF-8 (byte 0xFF at offset 3: 'run\\xff1')");
}

std::string safetensors_with_scale(const std::string& scale) {
  const std::string header = R"({"__metadata__":{"mantissa.scale.w":")" + scale +
                             R"("},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + std::string("\xcd\xcc\x8c\x3f", 4);  // 1.1f
}

TEST(Untrusted, SafetensorsScalesMustBeFiniteAndPositive) {
  const auto good = io::decode_safetensors(safetensors_with_scale("0.5"), "f").tensors.at("w");
  EXPECT_EQ(good.scale(), 0.5f);
  EXPECT_EQ(good.f32()[0], 1.1f);
  for (const char* bad : {"nan", "0", "-1", "1e999", "inf", "-0"}) {
    const std::string e = error_of([&] { io::decode_safetensors(safetensors_with_scale(bad), "f"); });
    EXPECT_NE(e.find("must be a finite number > 0"), std::string::npos) << bad << ": " << e;
  }
}

TEST(Untrusted, WrongHeaderLengthPutsNoRawBytesInTheMessage) {
  std::string file = safetensors_with_scale("1");
  file[0] = static_cast<char>(file[0] + 3);  // the header now swallows the weight bytes
  file += std::string("\x01\x02\x03\xfe\xff", 5);
  const std::string e = error_of([&] { io::decode_safetensors(file, "f.safetensors"); });
  EXPECT_EQ(e.rfind("f.safetensors: header: not valid JSON", 0), 0u) << e;
  EXPECT_TRUE(printable(e)) << e;
  EXPECT_LT(e.size(), 300u);
}

TEST(Untrusted, ModelConfigSizesAreBoundedBeforeAllocating) {
  const std::string e = error_of([] {
    nn::GPTConfig::from_json(R"({"vocab_size":256,"n_positions":100000000000,"n_embd":16,"n_layer":1,"n_head":2})");
  });
  EXPECT_EQ(e, "GPT config: context must be in [1, 16777216], got 100000000000");
}

}  // namespace
