// IDX reader (plain and gzip), normalised classification batches, seeded
// shuffling with resumable state, and bad files refused with the path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

#include "data/data_util.hpp"
#include "mantissa/data/idx.hpp"
#include "temp_dir.hpp"

namespace data = mantissa::data;
namespace fs = std::filesystem;
using data_test::error_of;

namespace {

std::string idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& values) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((d >> (8 * k)) & 0xFF));
  s.append(values.begin(), values.end());
  return s;
}

// Compressed by the gzip program (an independent implementation), so the
// test needs no zlib link either.
std::string gzip(const std::string& raw) {
  char tmpl[] = "/tmp/mantissa_gz_XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  close(fd);
  const std::string in = tmpl;
  std::ofstream(in, std::ios::binary) << raw;
  if (std::system(("gzip -n -f '" + in + "'").c_str()) != 0) throw std::runtime_error("gzip failed");
  std::ifstream f(in + ".gz", std::ios::binary);
  std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  fs::remove(in + ".gz");
  return out;
}

// N images of 2x3 pixels; pixel (i, k) = (i * 7 + k * 31) % 256, so row i is
// identifiable from pixels 0 and 1; label i % 10.
constexpr uint32_t kRows = 2, kCols = 3;
std::vector<uint8_t> pixels(uint32_t n) {
  std::vector<uint8_t> v;
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t k = 0; k < kRows * kCols; ++k) v.push_back(static_cast<uint8_t>((i * 7 + k * 31 + i / 37) % 256));
  return v;
}
std::vector<uint8_t> labels(uint32_t n) {
  std::vector<uint8_t> v;
  for (uint32_t i = 0; i < n; ++i) v.push_back(static_cast<uint8_t>(i % 10));
  return v;
}

data::ClassificationSet make_set(const TempDir& d, uint32_t n, data::Normalization norm = {}) {
  return data::load_idx_classification(d.write("img", idx_bytes(8, {n, kRows, kCols}, pixels(n))),
                                       d.write("lbl", gzip(idx_bytes(8, {n}, labels(n)))), 10, norm);
}

}  // namespace

TEST(Idx, PlainAndGzipReadTheSame) {
  TempDir d("idx");
  const std::string raw = idx_bytes(8, {5, kRows, kCols}, pixels(5));
  auto a = data::read_idx(d.write("plain", raw));
  auto b = data::read_idx(d.write("packed.gz", gzip(raw)));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{5, 2, 3}));
  EXPECT_EQ(a.values, pixels(5));
  EXPECT_EQ(b.dims, a.dims);
  EXPECT_EQ(b.values, a.values);
}

TEST(Idx, BadFilesAreRefusedNamingThePath) {
  TempDir d("idx");
  const std::string raw = idx_bytes(8, {4, kRows, kCols}, pixels(4));
  auto expect = [&](const std::string& name, const std::string& bytes, const std::string& needle) {
    const std::string path = d.write(name, bytes);
    const std::string msg = error_of([&] { data::read_idx(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
  };
  expect("short", raw.substr(0, 2), "too short");
  expect("magic", "\x01\x02" + raw.substr(2), "bad magic");
  expect("float", idx_bytes(0x0D, {1}, {0, 0, 0, 0}), "not unsigned byte");
  expect("trunc", raw.substr(0, raw.size() - 1), "truncated");
  expect("trailing", raw + "x", "bytes follow");
  expect("header", raw.substr(0, 9), "truncated IDX header");
  std::string gz = gzip(raw);
  expect("gztrunc.gz", gz.substr(0, gz.size() / 2), "truncated");
  std::string bad = gz;
  bad[bad.size() - 6] = static_cast<char>(bad[bad.size() - 6] ^ 0x5A);  // inside the CRC-32 trailer
  expect("gzcrc.gz", bad, "corrupt gzip");
  const std::string msg = error_of([] { data::read_idx("/nonexistent/x-ubyte"); });
  EXPECT_NE(msg.find("/nonexistent/x-ubyte"), std::string::npos) << msg;
}

TEST(Idx, ClassificationSetChecksAndNormalises) {
  TempDir d("idx");
  const data::Normalization norm{0.25f, 0.5f};
  auto s = make_set(d, 23, norm);
  EXPECT_EQ(s.size(), 23);
  EXPECT_EQ(s.features(), 6);
  const int64_t idx[] = {22, 0, 5};
  auto b = s.gather(idx, 3);
  ASSERT_EQ(b.inputs.shape(), (mantissa::Shape{3, 6}));
  ASSERT_EQ(b.targets.shape(), (mantissa::Shape{3}));
  const auto px = pixels(23);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(b.targets.data<int32_t>()[r], idx[r] % 10);
    for (int k = 0; k < 6; ++k) {
      const double want = (px[static_cast<size_t>(idx[r] * 6 + k)] / 255.0 - 0.25) / 0.5;
      EXPECT_NEAR(b.inputs.f32()[r * 6 + k], want, 1e-6);
    }
  }
  // Mismatched counts, bad labels, wrong rank.
  std::string msg = error_of([&] {
    data::load_idx_classification(d.write("i", idx_bytes(8, {3, kRows, kCols}, pixels(3))),
                                  d.write("l", idx_bytes(8, {4}, labels(4))));
  });
  EXPECT_NE(msg.find("3 images"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 labels"), std::string::npos) << msg;
  msg = error_of([&] {
    data::load_idx_classification(d.write("i", idx_bytes(8, {2, kRows, kCols}, pixels(2))),
                                  d.write("l", idx_bytes(8, {2}, {3, 10})));
  });
  EXPECT_NE(msg.find("label 10 of item 1"), std::string::npos) << msg;
  msg = error_of([&] {
    data::load_idx_classification(d.write("i", idx_bytes(8, {12}, pixels(2))), d.write("l", idx_bytes(8, {2}, {1, 1})));
  });
  EXPECT_NE(msg.find("[N, rows, cols]"), std::string::npos) << msg;
  msg = error_of([&] { data::load_fashion_mnist(d.path.string(), "train"); });
  EXPECT_NE(msg.find("train-images-idx3-ubyte"), std::string::npos) << "[" << msg << "]";
  msg = error_of([&] { data::load_fashion_mnist(d.path.string(), "validation"); });
  EXPECT_NE(msg.find("'validation'"), std::string::npos) << msg;
}

// Fisher-Yates of the same engine, written out here: pins the exact order so
// that a seed means the same batches on every machine.
TEST(ShuffledBatches, EpochsArePermutationsInTheSeededOrder) {
  TempDir d("idx");
  const uint32_t n = 50;
  auto s = make_set(d, n);
  data::ShuffledBatches sb(s, 8, 42);  // 6 batches per epoch, 2 examples dropped
  std::mt19937_64 rng(42);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order(n);
    for (uint32_t i = 0; i < n; ++i) order[i] = i;
    for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    std::set<int64_t> seen;
    for (int k = 0; k < 6; ++k) {
      auto b = sb.next();
      for (int r = 0; r < 8; ++r) {
        const int64_t want = order[static_cast<size_t>(k * 8 + r)];
        EXPECT_EQ(b.targets.data<int32_t>()[r], want % 10);
        // Identify the row by its first pixel (unnormalised: mean 0, std 1).
        const float p0 = b.inputs.f32()[r * 6];
        EXPECT_NEAR(p0, static_cast<float>(pixels(n)[static_cast<size_t>(want * 6)]) / 255.0f, 1e-7);
        EXPECT_TRUE(seen.insert(want).second);
      }
    }
    EXPECT_EQ(sb.epoch(), epoch);
  }
}

TEST(ShuffledBatches, StateResumesMidEpochAndAcrossEpochs) {
  TempDir d("idx");
  auto s = make_set(d, 30);
  for (int before : {2, 3, 7}) {  // 3 batches per epoch: mid-epoch, at the boundary, in epoch 2
    data::ShuffledBatches a(s, 10, 9);
    for (int k = 0; k < before; ++k) a.next();
    const std::string state = a.state_json();
    data::ShuffledBatches b(s, 10, 1);
    b.load_state(state);
    for (int k = 0; k < 5; ++k) {
      auto x = a.next(), y = b.next();
      EXPECT_EQ(std::vector<int32_t>(x.targets.data<int32_t>(), x.targets.data<int32_t>() + 10),
                std::vector<int32_t>(y.targets.data<int32_t>(), y.targets.data<int32_t>() + 10))
          << "after " << before << " + " << k;
      EXPECT_EQ(0, std::memcmp(x.inputs.raw(), y.inputs.raw(), x.inputs.bytes()));
    }
    EXPECT_EQ(a.epoch(), b.epoch());
  }
  data::ShuffledBatches c(s, 10, 9);
  EXPECT_THROW(c.load_state(R"({"kind":"text_windows"})"), data::DataError);
  EXPECT_THROW(c.load_state(R"({"kind":"shuffled_batches","epoch":0,"cursor":99,"rng":"1"})"), data::DataError);
  EXPECT_THROW(c.load_state(R"({"kind":"shuffled_batches","epoch":"0","cursor":1,"rng":"1"})"), data::DataError);
  EXPECT_THROW(c.load_state(R"({"kind":"shuffled_batches","epoch":0,"cursor":[],"rng":"1"})"), data::DataError);
  EXPECT_THROW(c.load_state(R"({"kind":1,"epoch":0,"cursor":1,"rng":"1"})"), data::DataError);
  EXPECT_THROW(data::ShuffledBatches(s, 31, 1), data::DataError);
  EXPECT_THROW(data::ShuffledBatches(s, 0, 1), data::DataError);
}

TEST(SequentialBatches, CoversTheSetInOrder) {
  TempDir d("idx");
  auto s = make_set(d, 23);
  data::SequentialBatches sb(s, 10);
  ASSERT_EQ(sb.num_batches(), 3);
  EXPECT_EQ(sb.batch(2).targets.dim(0), 3);
  int64_t i = 0;
  for (int64_t k = 0; k < 3; ++k) {
    auto b = sb.batch(k);
    for (int64_t r = 0; r < b.targets.dim(0); ++r, ++i) EXPECT_EQ(b.targets.data<int32_t>()[r], i % 10);
  }
  EXPECT_EQ(i, 23);
}

// The real data set, when scripts/data.sh has fetched it: Fashion-MNIST has
// exactly 6,000 training and 1,000 test images per class.
TEST(FashionMnist, RealFilesHaveTheKnownShapeAndBalance) {
  std::string dir;
  for (std::string root : {std::string(std::getenv("MANTISSA_DATA") ? std::getenv("MANTISSA_DATA") : ""),
                           std::string(MANTISSA_SOURCE_DIR) + "/.cache/data"})
    if (!root.empty() && fs::exists(root + "/fashion-mnist/train-images-idx3-ubyte.gz")) {
      dir = root + "/fashion-mnist";
      break;
    }
  if (dir.empty()) GTEST_SKIP() << "Fashion-MNIST not fetched (bash scripts/data.sh)";
  for (auto [split, n] : std::vector<std::pair<std::string, int64_t>>{{"train", 60000}, {"test", 10000}}) {
    auto s = data::load_fashion_mnist(dir, split);
    EXPECT_EQ(s.size(), n);
    EXPECT_EQ(s.features(), 784);
    std::vector<int64_t> per_class(10, 0);
    for (int32_t l : s.labels) ++per_class[static_cast<size_t>(l)];
    for (int64_t c : per_class) EXPECT_EQ(c, n / 10) << split;
  }
}

// Dimensions whose product wraps a 64-bit counter to the data size (here 0
// bytes: 2^20 x 2^20 x 2^24 = 2^64) are refused, not read past.
TEST(Idx, LyingDimensionsAreRefused) {
  TempDir d("idx");
  const std::string path = d.write("lying", idx_bytes(8, {1u << 20, 1u << 20, 1u << 24}, {}));
  const std::string msg = error_of([&] { data::read_idx(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("IDX dimensions: 1099511627776 x 16777216 overflows 64 bits"), std::string::npos) << msg;
  // Within 64 bits but not matching the data: the size check names both.
  const std::string big = d.write("big", idx_bytes(8, {1u << 31, 1u << 31}, {1, 2, 3}));
  EXPECT_NE(error_of([&] { data::read_idx(big); }).find("promise 4611686018427387904 values but 3 bytes"),
            std::string::npos);
}

// A gzip stream expanding beyond the limit stops there with an error; one
// below it reads in full.
TEST(Idx, DecompressedSizeIsLimited) {
  TempDir d("idx");
  const size_t limit = size_t{1} << 20;
  const std::vector<uint8_t> zeros(4 * limit, 0);
  const std::string bomb = d.write("bomb.gz", gzip(idx_bytes(8, {4u << 20}, zeros)));
  EXPECT_LT(fs::file_size(bomb), limit / 64);
  const std::string msg = error_of([&] { data::read_idx(bomb, limit); });
  EXPECT_NE(msg.find(bomb + ": gzip data decompresses to more than 1048576 bytes"), std::string::npos) << msg;
  const std::vector<uint8_t> fits(limit - 64, 7);
  const auto a = data::read_idx(d.write("fits.gz", gzip(idx_bytes(8, {static_cast<uint32_t>(fits.size())}, fits))), limit);
  EXPECT_EQ(a.values, fits);
}
