// Token files (llm.c with uint16 and uint32 ids, nanoGPT's headerless
// train.bin/val.bin), written here byte by byte from the format's definition:
// reading, splits, every refusal, the vocabulary check, window sampling
// against an integer re-derivation, validation coverage, resumable state.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <random>

#include "data/data_util.hpp"
#include "mantissa/data/text.hpp"
#include "mantissa/data/tokens.hpp"
#include "temp_dir.hpp"

namespace data = mantissa::data;
namespace fs = std::filesystem;
using data_test::error_of;
using data_test::ints;

namespace {

// Little-endian bytes of v, `width` of them.
void put(std::string& out, uint64_t v, int width) {
  for (int b = 0; b < width; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
}

// An llm.c file: 256 int32 header words (magic, version, count, zeros), then the ids.
std::string llmc_bytes(int32_t magic, int32_t version, int64_t count,
                       const std::vector<uint32_t>& ids, int width) {
  std::string s;
  const int64_t words[3] = {magic, version, count};
  for (int i = 0; i < 256; ++i) put(s, static_cast<uint32_t>(i < 3 ? words[i] : 0), 4);
  for (uint32_t id : ids) put(s, id, width);
  return s;
}
std::string llmc16(const std::vector<uint32_t>& ids) {
  return llmc_bytes(20240520, 1, static_cast<int64_t>(ids.size()), ids, 2);
}
std::string llmc32(const std::vector<uint32_t>& ids) {
  return llmc_bytes(20240801, 7, static_cast<int64_t>(ids.size()), ids, 4);
}
std::string nanogpt(const std::vector<uint32_t>& ids) {
  std::string s;
  for (uint32_t id : ids) put(s, id, 2);
  return s;
}

std::vector<uint32_t> random_ids(size_t n, uint32_t below, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> v(n);
  for (auto& x : v) x = static_cast<uint32_t>(rng() % below);
  return v;
}

std::vector<int32_t> read_all(const data::TokenSpan& s) {
  std::vector<int32_t> v(static_cast<size_t>(s.size));
  s.copy(0, s.size, v.data());
  return v;
}

std::vector<int32_t> as_int(const std::vector<uint32_t>& ids, size_t first = 0,
                            size_t n = SIZE_MAX) {
  n = std::min(n, ids.size() - first);
  return std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(first),
                              ids.begin() + static_cast<std::ptrdiff_t>(first + n));
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

}  // namespace

TEST(TokenFile, ReadsLlmcUint16AndUint32) {
  TempDir d("tokens");
  const auto small = random_ids(1000, 50257, 1);
  auto big = random_ids(1000, 200000, 2);
  big[3] = 131071;  // above uint16: read only as a 4-byte id
  const auto f16 = data::TokenFile::open(d.write("a.bin", llmc16(small)));
  EXPECT_EQ(f16.format(), "llm.c uint16");
  EXPECT_EQ(read_all(f16.tokens()), as_int(small));
  EXPECT_EQ(f16.max_id(), *std::max_element(small.begin(), small.end()));
  const auto f32 = data::TokenFile::open(d.write("b.bin", llmc32(big)));
  EXPECT_EQ(f32.format(), "llm.c uint32");
  EXPECT_EQ(read_all(f32.tokens()), as_int(big));
  EXPECT_EQ(f32.max_id(), *std::max_element(big.begin(), big.end()));
}

TEST(TokenCorpus, DirectoriesGiveTheTwoSplits) {
  TempDir nano("tokens"), llmc("tokens");
  const auto train = random_ids(3000, 65535, 3), val = random_ids(500, 65535, 4);
  nano.write("train.bin", nanogpt(train));
  nano.write("val.bin", nanogpt(val));
  const auto a = data::TokenCorpus::load(nano.path.string());
  EXPECT_EQ(read_all(a.train()), as_int(train));
  EXPECT_EQ(read_all(a.val()), as_int(val));
  EXPECT_HAS(a.summary(), "nanoGPT uint16");
  // llm.c's names; the two splits may even differ in id width.
  llmc.write("shakespeare_train.bin", llmc16(train));
  llmc.write("shakespeare_val.bin", llmc32(val));
  const auto b = data::TokenCorpus::load(llmc.path.string());
  EXPECT_EQ(read_all(b.train()), as_int(train));
  EXPECT_EQ(read_all(b.val()), as_int(val));
  EXPECT_TRUE(data::is_token_data(nano.path.string()));
}

TEST(TokenCorpus, OneFileHoldsOutItsLastTenPercent) {
  TempDir d("tokens");
  const auto ids = random_ids(1005, 1000, 5);  // floor(100.5) = 100 held out
  const auto c = data::TokenCorpus::load(d.write("one_train.bin", llmc16(ids)));
  EXPECT_EQ(c.train_size(), 905);
  EXPECT_EQ(c.val_size(), 100);
  EXPECT_EQ(read_all(c.train()), as_int(ids, 0, 905));
  EXPECT_EQ(read_all(c.val()), as_int(ids, 905));
}

TEST(TokenCorpus, DetectsTokenDataByNameOrMagic) {
  TempDir d("tokens");
  EXPECT_TRUE(data::is_token_data(d.write("x.bin", "anything")));
  EXPECT_TRUE(data::is_token_data(d.write("x.tok", llmc32({1, 2, 3}))));
  EXPECT_FALSE(data::is_token_data(d.write("x.txt", "plain text, not tokens")));
  TempDir empty("tokens");
  EXPECT_FALSE(data::is_token_data(empty.path.string()));  // read (and refused) as text
  EXPECT_TRUE(data::is_token_data(d.path.string()));       // it holds x.bin
}

TEST(TokenFile, RefusesBadFilesNamingThemAndTheProblem) {
  TempDir d("tokens");
  const auto ids = random_ids(100, 500, 6);
  const std::map<std::string, std::pair<std::string, std::string>> cases = {
      // name -> (bytes, what the message says)
      {"magic.bin", {llmc_bytes(12345, 1, 100, ids, 2), "bad magic 12345"}},
      {"version16.bin",
       {llmc_bytes(20240520, 7, 100, ids, 2), "needs version 1, the header says 7"}},
      {"version32.bin",
       {llmc_bytes(20240801, 1, 100, ids, 4), "needs version 7, the header says 1"}},
      {"short.bin",
       {llmc_bytes(20240520, 1, 101, ids, 2), "gives 101 tokens (202 bytes) but 200 bytes"}},
      {"long.bin",
       {llmc_bytes(20240801, 7, 99, ids, 4), "gives 99 tokens (396 bytes) but 400 bytes"}},
      {"zero.bin", {llmc_bytes(20240520, 1, 0, {}, 2), "gives 0 tokens"}},
      {"negative.bin", {llmc_bytes(20240520, 1, -5, ids, 2), "gives -5 tokens"}},
      {"truncated.bin",
       {llmc_bytes(20240520, 1, 100, ids, 2).substr(0, 600), "header truncated (600 of 1024"}},
      {"empty.bin", {"", "is empty"}},
      {"train.bin", {nanogpt(ids) + "x", "201 bytes is odd"}},
  };
  for (const auto& [name, c] : cases) {
    const std::string path = d.write(name, c.first);
    const std::string msg = error_of([&] { data::TokenFile::open(path); });
    EXPECT_HAS(msg, path);
    EXPECT_HAS(msg, c.second);
  }
  std::string msg = error_of([&] { data::TokenFile::open(d / "missing.bin"); });
  EXPECT_HAS(msg, "does not exist");
  // A symbolic link is refused, even to a good file; a FIFO is refused
  // without blocking on it.
  const std::string good = d.write("good.bin", llmc16(ids));
  fs::create_symlink(good, (d / "link.bin"));
  msg = error_of([&] { data::TokenFile::open(d / "link.bin"); });
  EXPECT_HAS(msg, "link.bin");
  EXPECT_HAS(msg, "symbolic link");
  ASSERT_EQ(::mkfifo((d / "fifo.bin").c_str(), 0600), 0);
  msg = error_of([&] { data::TokenFile::open(d / "fifo.bin"); });
  EXPECT_HAS(msg, "fifo.bin");
  EXPECT_HAS(msg, "not a regular file");
  EXPECT_NO_THROW(data::TokenFile::open(good));
}

TEST(TokenCorpus, RefusesIncompleteDirectories) {
  const auto ids = random_ids(100, 500, 7);
  auto refused = [&](const std::vector<std::string>& names, const std::string& says) {
    TempDir d("tokens");
    for (const std::string& n : names) d.write(n, llmc16(ids));
    const std::string msg = error_of([&] { data::TokenCorpus::load(d.path.string()); });
    EXPECT_HAS(msg, d.path.string());
    EXPECT_HAS(msg, says);
  };
  refused({"train.bin"}, "train.bin but no val.bin");
  refused({"val.bin"}, "val.bin but no train.bin");
  refused({}, "holds no token files");
  refused({"a_train.bin"}, "a_train.bin but no a_val.bin");
  refused({"a_train.bin", "a_val.bin", "b_train.bin", "b_val.bin"}, "several corpora (");
  refused({"a_train_000001.bin", "a_val_000000.bin", "b_train.bin", "b_val.bin"}, "several corpora (");
  refused({"a_train_000001.bin", "a_train_000002.bin"}, "but no a_val.bin (nor a_val_NNNNNN.bin shards)");
}

TEST(TokenCorpus, IdsAtOrAboveTheVocabularyAreRefusedWithTheirOffset) {
  TempDir d("tokens");
  auto train = random_ids(2000, 512, 8), val = random_ids(300, 512, 9);
  train[777] = 600;
  train[1500] = 700;
  d.write("train.bin", nanogpt(train));
  d.write("val.bin", nanogpt(val));
  const auto c =
      std::make_shared<const data::TokenCorpus>(data::TokenCorpus::load(d.path.string()));
  EXPECT_EQ(c->max_id(), 700u);
  std::string msg = error_of([&] { c->check_vocab(512); });
  EXPECT_HAS(msg, (d / "train.bin"));
  EXPECT_HAS(msg, "id 600 at token offset 777");
  EXPECT_HAS(msg, "vocabulary size 512");
  msg = error_of([&] { c->check_vocab(650); });
  EXPECT_HAS(msg, "id 700 at token offset 1500");
  EXPECT_NO_THROW(c->check_vocab(701));
  // No source is built over ids the model cannot embed.
  EXPECT_THROW(data::TextWindows(c, 512, 4, 8, 1), data::DataError);
  EXPECT_THROW(data::TextValidation(c, 512, 4, 8), data::DataError);
  // One file: an id in the held-out end is named by its offset in the file.
  auto one = random_ids(1000, 100, 10);
  one[950] = 100;
  const auto e = data::TokenCorpus::load(d.write("one.bin", llmc32(one)));
  msg = error_of([&] { e.check_vocab(100); });
  EXPECT_HAS(msg, "id 100 at token offset 950");
}

// Starts by rejection sampling from std::mt19937_64(seed): draws at or above
// the largest multiple of n below 2^64 are redrawn, then x % n.
TEST(TokenWindows, WindowsMatchAnIntegerRederivation) {
  TempDir d("tokens");
  auto train = random_ids(5000, 100000, 11);
  d.write("w_train.bin", llmc32(train));
  d.write("w_val.bin", llmc32(random_ids(200, 100000, 12)));
  const auto c =
      std::make_shared<const data::TokenCorpus>(data::TokenCorpus::load(d.path.string()));
  const int64_t B = 6, T = 32;
  data::TextWindows w(c, 100000, B, T, 4321);
  std::mt19937_64 ref(4321);
  const uint64_t n = train.size() - T;
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (int k = 0; k < 4; ++k) {
    const mantissa::nn::Batch b = w.next();
    ASSERT_EQ(b.inputs.shape(), (mantissa::Shape{B, T}));
    const auto in = ints(b.inputs), tg = ints(b.targets);
    for (int64_t r = 0; r < B; ++r) {
      uint64_t x = ref();
      while (x >= limit) x = ref();
      const size_t start = x % n;
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(in[static_cast<size_t>(r * T + t)],
                  static_cast<int32_t>(train[start + static_cast<size_t>(t)]));
        ASSERT_EQ(tg[static_cast<size_t>(r * T + t)],
                  static_cast<int32_t>(train[start + static_cast<size_t>(t) + 1]));
      }
    }
  }
}

// The byte corpus and a token file holding the same values as ids draw the
// same windows from the same seed: one sampler for both.
TEST(TokenWindows, SameSamplerAsTheByteCorpus) {
  TempDir d("tokens");
  const auto ids = random_ids(4000, 256, 13);
  std::string bytes;
  for (uint32_t id : ids) bytes.push_back(static_cast<char>(id));
  const auto text = data::TextCorpus::from_bytes(bytes, "mem");
  const auto tokens = std::make_shared<const data::TokenCorpus>(
      data::TokenCorpus::load(d.write("s.bin", llmc16(ids))));
  ASSERT_EQ(tokens->train_size(), text.train_size());
  data::TextWindows a(text, 4, 16, 99), b(tokens, 256, 4, 16, 99);
  for (int k = 0; k < 3; ++k) {
    const auto x = a.next(), y = b.next();
    EXPECT_EQ(ints(x.inputs), ints(y.inputs));
    EXPECT_EQ(ints(x.targets), ints(y.targets));
  }
  data::TextValidation va(text, 4, 16), vb(tokens, 256, 4, 16);
  ASSERT_EQ(va.num_batches(), vb.num_batches());
  for (int64_t k = 0; k < va.num_batches(); ++k)
    EXPECT_EQ(ints(va.batch(k).targets), ints(vb.batch(k).targets));
  EXPECT_FALSE(va.per_token());
  EXPECT_TRUE(vb.per_token());
}

TEST(TokenWindows, StateRoundTripsAndIsNotAByteCorpusState) {
  TempDir d("tokens");
  const auto c = std::make_shared<const data::TokenCorpus>(
      data::TokenCorpus::load(d.write("r.bin", llmc16(random_ids(3000, 1000, 14)))));
  data::TextWindows a(c, 1000, 4, 8, 5);
  for (int k = 0; k < 2; ++k) a.next();
  const std::string state = a.state_json();
  std::vector<std::vector<int32_t>> want;
  for (int k = 0; k < 3; ++k) want.push_back(ints(a.next().inputs));
  data::TextWindows b(c, 1000, 4, 8, 12345);
  b.load_state(state);
  EXPECT_EQ(b.batches_drawn(), 2);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(ints(b.next().inputs), want[static_cast<size_t>(k)]);
  // A byte-corpus run cannot resume from token windows, nor the reverse.
  const auto text = data::TextCorpus::from_bytes(std::string(3000, 'a'), "mem");
  data::TextWindows bytes(text, 4, 8, 5);
  std::string msg = error_of([&] { bytes.load_state(state); });
  EXPECT_HAS(msg, "'token_windows' state, not 'text_windows'");
  msg = error_of([&] { b.load_state(bytes.state_json()); });
  EXPECT_HAS(msg, "'text_windows' state, not 'token_windows'");
}

// Every validation token after the first is a target exactly once.
TEST(TokenValidation, CoversTheValidationSplitExactlyOnce) {
  TempDir d("tokens");
  std::vector<uint32_t> val(1237);
  for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<uint32_t>(i);  // id = position
  d.write("train.bin", nanogpt(random_ids(500, 2000, 15)));
  d.write("val.bin", nanogpt(val));
  const auto c =
      std::make_shared<const data::TokenCorpus>(data::TokenCorpus::load(d.path.string()));
  data::TextValidation v(c, 2000, 5, 50);
  std::vector<int> seen(val.size(), 0);
  int64_t count = 0;
  for (int64_t k = 0; k < v.num_batches(); ++k) {
    const auto b = v.batch(k);
    const auto in = ints(b.inputs), tg = ints(b.targets);
    for (size_t i = 0; i < tg.size(); ++i) {
      if (tg[i] < 0) continue;
      EXPECT_EQ(tg[i], in[i] + 1);  // the next token
      ++seen[static_cast<size_t>(tg[i])];
      ++count;
    }
  }
  EXPECT_EQ(count, static_cast<int64_t>(val.size()) - 1);
  EXPECT_EQ(count, v.num_targets());
  EXPECT_EQ(seen[0], 0);
  for (size_t i = 1; i < val.size(); ++i) ASSERT_EQ(seen[i], 1) << "token " << i;
  EXPECT_NO_THROW(
      data::TextValidation(c, 2000, 5, 499));  // 500 training tokens: one window of 499 + 1
  const std::string msg = error_of([&] { data::TextValidation(c, 2000, 5, 500); });
  EXPECT_HAS(msg, "sequence length 500 is too long");
  EXPECT_HAS(msg, "500 training tokens");
}

// llm.c's shards: fineweb_train_000001.bin ... as the training split (name
// order), fineweb_val_000000.bin ... as the validation split. Windows are
// uniform over every shard's starts laid end to end, each inside one shard:
// re-derived here from the sampler's definition with integer arithmetic.
TEST(TokenShards, WindowsAreUniformOverTheShardsAndNeverSpanTwo) {
  TempDir d("tokens");
  // id = 10000 x shard + position, so a window's ids say where it came from
  std::vector<std::vector<uint32_t>> shards = {{}, {}, {}};
  const size_t sizes[] = {700, 140, 2300};
  for (size_t k = 0; k < 3; ++k)
    for (size_t i = 0; i < sizes[k]; ++i) shards[k].push_back(static_cast<uint32_t>(10000 * (k + 1) + i));
  // written out of order and with mixed widths: read in name order
  d.write("fineweb_train_000003.bin", llmc32(shards[2]));
  d.write("fineweb_train_000001.bin", llmc16(shards[0]));
  d.write("fineweb_train_000002.bin", llmc16(shards[1]));
  d.write("fineweb_val_000000.bin", llmc16(random_ids(100, 40000, 1)));
  const auto c = std::make_shared<const data::TokenCorpus>(data::TokenCorpus::load(d.path.string()));
  ASSERT_EQ(c->train_shards().size(), 3u);
  EXPECT_EQ(c->train_size(), 700 + 140 + 2300);
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(read_all(c->train_shards()[k]), as_int(shards[k]));
  EXPECT_HAS(c->summary(), "3 shards, fineweb_train_000001.bin ... fineweb_train_000003.bin");
  EXPECT_HAS(error_of([&] { (void)c->train(); }), "3 shards");
  const int64_t B = 8, T = 40;
  data::TextWindows w(c, 40000, B, T, 99);
  std::mt19937_64 ref(99);
  const uint64_t first[] = {0, 700 - T, 700 - T + 140 - T}, n = first[2] + 2300 - T;
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  std::map<size_t, int> per_shard;
  for (int step = 0; step < 50; ++step) {
    const auto b = w.next();
    const auto in = ints(b.inputs), tg = ints(b.targets);
    for (int64_t r = 0; r < B; ++r) {
      uint64_t x = ref();
      while (x >= limit) x = ref();
      const uint64_t at = x % n;
      const size_t k = at >= first[2] ? 2 : at >= first[1] ? 1 : 0;
      const size_t start = static_cast<size_t>(at - first[k]);
      ++per_shard[k];
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(in[static_cast<size_t>(r * T + t)], static_cast<int32_t>(shards[k][start + t]));
        ASSERT_EQ(tg[static_cast<size_t>(r * T + t)], static_cast<int32_t>(shards[k][start + t + 1]));
      }
    }
  }
  EXPECT_EQ(per_shard.size(), 3u);  // 400 windows, 100 of 3020 starts in the short shard
}

TEST(TokenShards, ValidationCoversEveryShardOnce) {
  TempDir d("tokens");
  d.write("t_train_000000.bin", llmc16(random_ids(300, 60000, 2)));
  const size_t sizes[] = {123, 57};
  for (size_t k = 0; k < 2; ++k) {
    std::vector<uint32_t> v;
    for (size_t i = 0; i < sizes[k]; ++i) v.push_back(static_cast<uint32_t>(10000 * (k + 1) + i));
    d.write("t_val_00000" + std::to_string(k) + ".bin", llmc16(v));
  }
  const auto c = std::make_shared<const data::TokenCorpus>(data::TokenCorpus::load(d.path.string()));
  data::TextValidation v(c, 60000, 3, 10);
  std::map<int32_t, int> seen;
  for (int64_t k = 0; k < v.num_batches(); ++k) {
    const auto b = v.batch(k);
    const auto in = ints(b.inputs), tg = ints(b.targets);
    for (size_t i = 0; i < tg.size(); ++i) {
      if (tg[i] < 0) continue;
      EXPECT_EQ(tg[i], in[i] + 1);  // the next token of the same shard
      ++seen[tg[i]];
    }
  }
  // every token of each shard but its first is a target once
  EXPECT_EQ(static_cast<int64_t>(seen.size()), (123 - 1) + (57 - 1));
  EXPECT_EQ(v.num_targets(), (123 - 1) + (57 - 1));
  for (size_t k = 0; k < 2; ++k)
    for (size_t i = 1; i < sizes[k]; ++i) ASSERT_EQ(seen[static_cast<int32_t>(10000 * (k + 1) + i)], 1);
  // a shard too short for one window is named
  const std::string msg = error_of([&] { data::TextValidation(c, 60000, 3, 57); });
  EXPECT_HAS(msg, "t_val_000001.bin");
  EXPECT_HAS(msg, "every shard needs at least 58 tokens");
}
