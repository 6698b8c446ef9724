// Byte-level text corpus: split sizes, window sampling against an
// independent derivation from std::mt19937_64, full validation coverage
// (every held-out byte a target exactly once), resumable state, bad input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <array>
#include <functional>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "data/data_util.hpp"
#include "mantissa/data/text.hpp"

namespace data = mantissa::data;
using mantissa::nn::Batch;
using data_test::error_of;
using data_test::ints;

namespace {

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

std::string temp_file(const std::string& contents) {
  char tmpl[] = "/tmp/mantissa_text_XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  close(fd);
  std::ofstream(tmpl, std::ios::binary) << contents;
  return tmpl;
}

}  // namespace

TEST(TextCorpus, SplitsTheLastTenPercent) {
  auto c = data::TextCorpus::from_bytes(std::string(1000, 'a'), "mem");
  EXPECT_EQ(c.train_size(), 900);
  EXPECT_EQ(c.val_size(), 100);
  auto d = data::TextCorpus::from_bytes(std::string(15, 'a'), "mem");  // floor(1.5) = 1 held out
  EXPECT_EQ(d.train_size(), 14);
  EXPECT_EQ(d.val_size(), 1);
  const std::string text = "héllo wörld, ünïcode ok\n" + std::string(200, 'x');
  const std::string path = temp_file(text);
  auto e = data::TextCorpus::load(path);
  EXPECT_EQ(e.size(), static_cast<int64_t>(text.size()));
  EXPECT_EQ(0, std::memcmp(e.train_bytes(), text.data(), text.size()));
  std::filesystem::remove(path);
}

TEST(TextCorpus, BadInputNamesThePathAndSizes) {
  std::string msg = error_of([] { data::TextCorpus::load("/nonexistent/corpus.txt"); });
  EXPECT_NE(msg.find("/nonexistent/corpus.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  const std::string empty = temp_file("");
  msg = error_of([&] { data::TextCorpus::load(empty); });
  EXPECT_NE(msg.find(empty), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  std::filesystem::remove(empty);
  msg = error_of([] { data::TextCorpus::load("/tmp"); });
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;

  auto c = data::TextCorpus::from_bytes(std::string(100, 'a'), "small.txt");  // 90 train, 10 val
  EXPECT_NO_THROW(c.check_seq_len(9));
  msg = error_of([&] { c.check_seq_len(10); });
  EXPECT_NE(msg.find("small.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sequence length 10"), std::string::npos) << msg;
  EXPECT_NE(msg.find("10 held out"), std::string::npos) << msg;
  msg = error_of([&] { data::TextWindows(c, 4, 500, 1); });
  EXPECT_NE(msg.find("sequence length 500"), std::string::npos) << msg;
  msg = error_of([&] { data::TextWindows(c, 0, 4, 1); });
  EXPECT_NE(msg.find("batch size"), std::string::npos) << msg;
  msg = error_of([&] { c.check_seq_len(-3); });
  EXPECT_NE(msg.find("positive"), std::string::npos) << msg;
  EXPECT_THROW(data::TextCorpus::from_bytes("abc", "x", 1.5), data::DataError);
}

// Window starts are uniform in [0, train_size - T - 1]: with a 64-bit engine
// and a small range, rejection practically never triggers, so the starts
// are rng() % (train_size - T) of the same engine.
TEST(TextWindows, WindowsMatchIndependentDerivation) {
  const std::string text = random_bytes(5000, 9);
  auto c = data::TextCorpus::from_bytes(text, "mem");
  const int64_t B = 8, T = 16;
  data::TextWindows w(c, B, T, 1234);
  std::mt19937_64 ref(1234);
  const auto range = static_cast<uint64_t>(c.train_size() - T);
  for (int k = 0; k < 5; ++k) {
    Batch b = w.next();
    ASSERT_EQ(b.inputs.shape(), (mantissa::Shape{B, T}));
    ASSERT_EQ(b.targets.shape(), (mantissa::Shape{B, T}));
    EXPECT_EQ(b.inputs.dtype(), mantissa::DType::i32);
    auto in = ints(b.inputs), tg = ints(b.targets);
    for (int64_t r = 0; r < B; ++r) {
      const auto start = static_cast<int64_t>(ref() % range);
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(in[static_cast<size_t>(r * T + t)], static_cast<uint8_t>(text[static_cast<size_t>(start + t)]));
        ASSERT_EQ(tg[static_cast<size_t>(r * T + t)], static_cast<uint8_t>(text[static_cast<size_t>(start + t + 1)]));
      }
    }
  }
  EXPECT_EQ(w.batches_drawn(), 5);
}

TEST(TextWindows, EveryStartReachableNeverPastTheTrainingSplit) {
  std::string text(110, '\0');  // 99 train, 11 validation bytes; byte value = position
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i);
  auto c = data::TextCorpus::from_bytes(text, "mem");
  const int64_t T = 10;
  data::TextWindows w(c, 64, T, 5);
  std::array<int, 110> seen{};
  for (int k = 0; k < 200; ++k) {
    auto tg = ints(w.next().targets);
    for (size_t r = 0; r < 64; ++r) {
      const int32_t start = tg[r * T] - 1;
      ASSERT_LE(tg[r * T + T - 1], 98) << "a target from the validation split";
      ++seen[static_cast<size_t>(start)];
    }
  }
  // Starts 0..88 = train_size - T - 1; the window of start 88 ends at byte 98.
  for (int s = 0; s <= 88; ++s) EXPECT_GT(seen[static_cast<size_t>(s)], 0) << "start " << s << " never drawn";
  EXPECT_EQ(seen[89], 0);
}

TEST(TextWindows, StateRoundTripContinuesIdentically) {
  auto c = data::TextCorpus::from_bytes(random_bytes(3000, 1), "mem");
  data::TextWindows a(c, 4, 8, 77);
  for (int k = 0; k < 3; ++k) a.next();
  const std::string state = a.state_json();
  std::vector<std::vector<int32_t>> want;
  for (int k = 0; k < 3; ++k) want.push_back(ints(a.next().inputs));
  data::TextWindows b(c, 4, 8, 999);
  b.load_state(state);
  EXPECT_EQ(b.batches_drawn(), 3);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(ints(b.next().inputs), want[static_cast<size_t>(k)]);
  data::TextWindows d(c, 4, 8, 78);
  EXPECT_NE(ints(d.next().inputs), ints(data::TextWindows(c, 4, 8, 77).next().inputs));
  EXPECT_THROW(b.load_state("{}"), data::DataError);
  EXPECT_THROW(b.load_state(R"({"kind":"text_windows","batches":1,"rng":"garbage"})"), data::DataError);
  EXPECT_THROW(b.load_state("not json"), data::DataError);
  // Fields of the wrong JSON type are refused as bad data, not escaped as
  // nlohmann type errors.
  auto wrong_type = [&](const std::string& key, nlohmann::json value) {
    auto j = nlohmann::json::parse(state);
    j[key] = std::move(value);
    return j.dump();
  };
  EXPECT_THROW(b.load_state(wrong_type("seed", "x")), data::DataError);
  EXPECT_THROW(b.load_state(wrong_type("seed", -1)), data::DataError);
  EXPECT_THROW(b.load_state(wrong_type("kind", 7)), data::DataError);
  EXPECT_THROW(b.load_state("[1,2]"), data::DataError);
  // An all-zero generator state (312 zero words and an index) would draw
  // window 0 forever; a state with one nonzero word is a valid one.
  std::string zeros;
  for (int i = 0; i < 312; ++i) zeros += "0 ";
  try {
    b.load_state(wrong_type("rng", zeros + "312"));
    ADD_FAILURE() << "an all-zero RNG state was accepted";
  } catch (const data::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("RNG state is all zero"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(b.load_state(wrong_type("rng", "1 " + zeros.substr(2) + "312")));
}

// Every validation byte after the first is a target exactly once: the
// histogram of targets equals the histogram of val bytes [1, V).
TEST(TextValidation, CoversTheHeldOutBytesExactlyOnce) {
  for (auto [n, T, B] : std::vector<std::array<int64_t, 3>>{{10010, 25, 7}, {10001 + 900, 100, 4}, {2000, 13, 64}}) {
    const std::string text = random_bytes(static_cast<size_t>(n), static_cast<uint64_t>(n));
    auto c = data::TextCorpus::from_bytes(text, "mem");
    const int64_t V = c.val_size();
    data::TextValidation v(c, B, T);
    std::array<int64_t, 256> want{}, got{};
    for (int64_t i = 1; i < V; ++i) ++want[c.val_bytes()[i]];
    int64_t count = 0;
    for (int64_t k = 0; k < v.num_batches(); ++k) {
      Batch b = v.batch(k);
      EXPECT_LE(b.inputs.dim(0), B);
      auto in = ints(b.inputs), tg = ints(b.targets);
      for (size_t i = 0; i < tg.size(); ++i) {
        if (tg[i] < 0) continue;
        ++got[static_cast<size_t>(tg[i])];
        ++count;
        if ((i + 1) % static_cast<size_t>(T) != 0 && tg[i + 1] >= 0) {
          EXPECT_EQ(in[i + 1], tg[i]);
        }
      }
    }
    EXPECT_EQ(count, V - 1) << "n " << n;
    EXPECT_EQ(v.num_targets(), V - 1);
    EXPECT_EQ(got, want) << "n " << n;
    auto first = ints(v.batch(0).inputs);
    for (int64_t t = 0; t < T; ++t) EXPECT_EQ(first[static_cast<size_t>(t)], c.val_bytes()[t]);
    // Deterministic.
    EXPECT_EQ(ints(v.batch(v.num_batches() - 1).targets), ints(v.batch(v.num_batches() - 1).targets));
  }
}

TEST(TextValidation, MaxBatchesKeepsTheFirstBatches) {
  auto c = data::TextCorpus::from_bytes(random_bytes(20000, 3), "mem");
  data::TextValidation all(c, 4, 16), few(c, 4, 16, 2);
  EXPECT_EQ(few.num_batches(), 2);
  EXPECT_EQ(ints(few.batch(1).inputs), ints(all.batch(1).inputs));
  EXPECT_THROW(few.batch(2), std::out_of_range);
}
