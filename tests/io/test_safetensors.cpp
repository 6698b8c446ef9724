// safetensors: a hand-computed golden byte layout, bit-exact round trips of
// every dtype, and each kind of corrupt input refused with the right message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "mantissa/io/files.hpp"
#include "mantissa/io/safetensors.hpp"

using mantissa::DType;
using mantissa::Tensor;
namespace io = mantissa::io;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/mantissa_io_XXXXXX";
  const char* d = mkdtemp(tmpl);
  if (!d) throw std::runtime_error("mkdtemp failed");
  return d;
}

std::string le64(uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  return s;
}

// A file from a header text and data bytes (no padding), for corrupt cases.
std::string file_of(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

void expect_format_error(const std::string& bytes, const std::vector<std::string>& needles) {
  try {
    io::decode_safetensors(bytes, "bad.safetensors");
    ADD_FAILURE() << "accepted; expected an error mentioning " << needles[0];
  } catch (const io::FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

}  // namespace

// Worked by hand: the header
//   {"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[1,1],"data_offsets":[8,12]}}
// is 110 bytes, padded with 2 spaces to 112 = 0x70; then 1.0f = 00 00 80 3f,
// -2.0f = 00 00 00 c0, int32 7 = 07 00 00 00.
TEST(Safetensors, GoldenByteLayout) {
  Tensor a = Tensor::from({1.0f, -2.0f}, {2});
  Tensor b = Tensor::empty({1, 1}, DType::i32);
  b.data<int32_t>()[0] = 7;
  const std::string got = io::encode_safetensors({{"a", a}, {"b", b}});
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[1,1],"data_offsets":[8,12]}})";
  ASSERT_EQ(header.size(), 110u);
  std::string want("\x70\0\0\0\0\0\0\0", 8);
  want += header + "  ";
  want += std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x07\x00\x00\x00", 12);
  EXPECT_EQ(got.size(), 8u + 112u + 12u);
  EXPECT_EQ(got, want);
  // And back.
  auto f = io::decode_safetensors(want, "golden");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors.at("a").to_vector(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(f.tensors.at("b").data<int32_t>()[0], 7);
  EXPECT_EQ(f.tensors.at("b").shape(), (mantissa::Shape{1, 1}));
}

TEST(Safetensors, MetadataComesFirstAndRoundTrips) {
  Tensor a = Tensor::from({0.5f}, {1});
  const std::string got = io::encode_safetensors({{"x", a}}, {{"format", "pt"}});
  EXPECT_EQ(got.substr(8, 31), R"({"__metadata__":{"format":"pt"})");
  EXPECT_EQ((got.size() - 8 - 4) % 8, 0u);  // data starts 8-byte aligned
  auto f = io::decode_safetensors(got, "m");
  EXPECT_EQ(f.metadata.at("format"), "pt");
}

TEST(Safetensors, EveryDtypeRoundTripsBitForBit) {
  std::mt19937_64 rng(5);
  std::vector<std::pair<std::string, Tensor>> tensors;
  int k = 0;
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::e4m3fn, DType::e5m2, DType::e4m3fnuz, DType::e5m2fnuz,
                  DType::i32}) {
    Tensor x = Tensor::empty({3, 5 + k}, t);
    auto* p = static_cast<unsigned char*>(x.raw());
    for (size_t i = 0; i < x.bytes(); ++i) p[i] = static_cast<unsigned char>(rng());
    tensors.emplace_back(std::string("t.") + mantissa::dtype_name(t), x);
    ++k;
  }
  Tensor scaled = Tensor::from({1, 2, 3}, {3});
  scaled.set_scale(0.1f);  // not a power of two: must survive exactly
  tensors.emplace_back("scaled", scaled);
  tensors.emplace_back("empty", Tensor::empty({0, 4}));
  tensors.emplace_back("scalar", Tensor::from({42.0f}, {}));

  const std::string dir = temp_dir();
  const std::string path = dir + "/all.safetensors";
  io::save_safetensors(path, tensors, {{"note", "round trip"}});
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto f = io::load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const Tensor& u = f.tensors.at(name);
    EXPECT_EQ(u.dtype(), t.dtype()) << name;
    EXPECT_EQ(u.shape(), t.shape()) << name;
    EXPECT_EQ(u.scale(), t.scale()) << name;
    EXPECT_EQ(0, std::memcmp(u.raw(), t.raw(), t.bytes())) << name;
  }
  EXPECT_EQ(f.metadata.size(), 1u);  // the scale key is internal
  EXPECT_EQ(f.metadata.at("note"), "round trip");
  // Saving what was loaded gives the same bytes.
  std::vector<std::pair<std::string, Tensor>> again;
  for (const auto& [name, t] : tensors) again.emplace_back(name, f.tensors.at(name));
  EXPECT_EQ(io::encode_safetensors(again, f.metadata), io::read_file(path));
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, CorruptInputsAreRefused) {
  const std::string ok_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  ASSERT_NO_THROW(io::decode_safetensors(file_of(ok_header, data), "ok"));

  expect_format_error(std::string("\x10\0\0", 3), {"truncated", "8-byte"});
  expect_format_error(le64(1000) + ok_header, {"truncated", "header length 1000"});
  expect_format_error(le64(uint64_t{1} << 50) + ok_header, {"implausibly large"});
  expect_format_error(file_of(R"({"w":{"dtype":"F32",)", data), {"not valid JSON"});
  expect_format_error(file_of("[1,2]", ""), {"not a JSON object"});
  expect_format_error(file_of(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", data),
                      {"'w'", "unknown dtype 'F64'"});
  expect_format_error(file_of(ok_header, data.substr(0, 5)), {"'w'", "beyond", "truncated"});
  expect_format_error(file_of(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
                      {"'w'", "[3]", "needs 12"});
  expect_format_error(file_of(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data),
                      {"'w'", "negative"});
  expect_format_error(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,0]}})", data), {"'w'", "begin"});
  expect_format_error(file_of(R"({"w":{"dtype":"F32","shape":[2]}})", data), {"'w'", "data_offsets"});
  expect_format_error(file_of(ok_header, data + "xyz"), {"3 trailing bytes"});
  expect_format_error(
      file_of(R"({"u":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              data),
      {"overlaps"});
  expect_format_error(file_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data), {"'w'", "gap"});
  expect_format_error(file_of(R"({"__metadata__":{"k":3},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
                      {"not a string"});

  try {
    io::load_safetensors("/nonexistent/dir/x.safetensors");
    ADD_FAILURE() << "missing file accepted";
  } catch (const io::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.safetensors"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, LoadIntoChecksNamesShapesAndDtypes) {
  auto f = io::decode_safetensors(
      io::encode_safetensors({{"a", Tensor::from({1, 2}, {2})}, {"b", Tensor::from({3, 4, 5}, {3})}}), "f.safetensors");
  Tensor a = Tensor::zeros({2}), b = Tensor::zeros({3});
  io::load_into(f, "f.safetensors", {{"a", &a}, {"b", &b}});
  EXPECT_EQ(b.to_vector(), (std::vector<float>{3, 4, 5}));

  auto expect = [&](const std::vector<std::pair<std::string, Tensor*>>& dst, const std::string& needle) {
    try {
      io::load_into(f, "f.safetensors", dst);
      ADD_FAILURE() << "accepted; expected " << needle;
    } catch (const io::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("f.safetensors"), std::string::npos) << e.what();
    }
  };
  Tensor wrong = Tensor::zeros({4}), c = Tensor::zeros({1}), half = Tensor::zeros({3}, DType::bf16);
  expect({{"a", &a}, {"b", &wrong}}, "tensor 'b': shape [3] but [4] expected");
  expect({{"a", &a}, {"b", &b}, {"c", &c}}, "tensor 'c': missing");
  expect({{"a", &a}}, "tensor 'b': unexpected");
  expect({{"a", &a}, {"b", &half}}, "dtype F32 but BF16 expected");
  // A refused load leaves every destination untouched.
  Tensor a2 = Tensor::zeros({2});
  expect({{"a", &a2}, {"b", &wrong}}, "shape");
  EXPECT_EQ(a2.to_vector(), (std::vector<float>{0, 0}));
}

TEST(Files, Crc32MatchesKnownValues) {
  // Standard check value of CRC-32/ISO-HDLC (zlib's crc32).
  EXPECT_EQ(io::crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(io::crc32("", 0), 0u);
  // Incremental use gives the same result.
  EXPECT_EQ(io::crc32("6789", 4, io::crc32("12345", 5)), 0xCBF43926u);
}

// A file written by the reference implementation (safetensors 0.8.0's Rust
// core, low-precision codes from ml_dtypes): tests/io/make_golden_safetensors.py.
TEST(Safetensors, ReadsTheReferenceImplementationsFile) {
  const std::string path = std::string(MANTISSA_SOURCE_DIR) + "/tests/io/data/reference.safetensors";
  auto f = io::load_safetensors(path);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.metadata.at("writer"), "safetensors 0.8.0");
  ASSERT_EQ(f.tensors.size(), 6u);
  auto values = [&](const std::string& name) { return f.tensors.at(name).to_vector(); };
  std::vector<float> wte;
  for (int i = 0; i < 12; ++i) wte.push_back(static_cast<float>(i) * 0.5f - 2.0f);
  EXPECT_EQ(f.tensors.at("transformer.wte.weight").shape(), (mantissa::Shape{3, 4}));
  EXPECT_EQ(values("transformer.wte.weight"), wte);
  EXPECT_EQ(f.tensors.at("h.bf16").dtype(), DType::bf16);
  EXPECT_EQ(values("h.bf16"), (std::vector<float>{1.0f, -2.5f, 3.140625f, 0.0f, std::ldexp(1.0f, -133)}));
  EXPECT_EQ(f.tensors.at("h.f16").shape(), (mantissa::Shape{2, 2}));
  EXPECT_EQ(values("h.f16"), (std::vector<float>{0.5f, 65504.0f, -std::ldexp(1.0f, -10), std::ldexp(1.0f, -24)}));
  EXPECT_EQ(f.tensors.at("q.e4m3").dtype(), DType::e4m3fn);
  EXPECT_EQ(values("q.e4m3"), (std::vector<float>{448.0f, -std::ldexp(1.0f, -9), 1.5f, 0.0f}));
  EXPECT_EQ(f.tensors.at("q.e5m2").dtype(), DType::e5m2);
  EXPECT_EQ(values("q.e5m2"), (std::vector<float>{57344.0f, -std::ldexp(1.0f, -16), 3.0f}));
  const auto* idx = f.tensors.at("idx").data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(idx, idx + 3), (std::vector<int32_t>{7, -1, 2147483647}));
  // Written back in the file's data order, the data section is identical
  // and the header agrees except for the order of the metadata keys.
  std::vector<std::pair<std::string, Tensor>> order;
  for (const char* n : {"transformer.wte.weight", "idx", "h.bf16", "h.f16", "q.e4m3", "q.e5m2"})
    order.emplace_back(n, f.tensors.at(n));
  const std::string ours = io::encode_safetensors(order, f.metadata);
  const std::string ref = io::read_file(path);
  ASSERT_EQ(ours.size(), ref.size());
  EXPECT_EQ(ours.substr(ours.size() - 85), ref.substr(ref.size() - 85));
  EXPECT_EQ(ours.substr(0, 8), ref.substr(0, 8));
}
