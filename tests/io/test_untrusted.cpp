// Reading outside input: JSON nesting is bounded, excerpts of bad input are
// short and printable, safetensors scales must be finite and positive, and a
// corrupt header length never puts raw bytes into a message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

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
