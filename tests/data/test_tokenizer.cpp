// The tokenizer on tokenizer.json files written here by hand: BPE merge order,
// unk handling, WordPiece with the BERT normalizer, added tokens; every
// refusal (the key and the file named); invalid UTF-8 (the offset named); and
// the llm.c writer: the reader (TokenFile) takes what it writes, and a link,
// a foreign file or a failed write leaves what was there untouched.
// Agreement with the Hugging Face library itself: tests/python/test_tokenize.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/data_util.hpp"
#include "mantissa/data/tokenizer.hpp"
#include "mantissa/data/tokens.hpp"
#include "temp_dir.hpp"

namespace data = mantissa::data;
namespace fs = std::filesystem;
using data_test::error_of;
using json = nlohmann::json;
using Ids = std::vector<uint32_t>;

namespace {

json bpe_json() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 7, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "<unk>": 6},
              "merges": [["b", "c"], ["a", "b"], "a bc"]}})");
}

json wordpiece_json() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                   "strip_accents": null, "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": null, "decoder": null,
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 12,
              "vocab": {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3, "hello": 4, "!": 5, "中": 6}}})");
}

Ids encode(const json& j, const std::string& text) {
  return data::Tokenizer::parse(j.dump(), "test.json").encode(text);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

Ids read_back(const std::string& path) {
  const data::TokenFile f = data::TokenFile::open(path);
  std::vector<int32_t> v(static_cast<size_t>(f.tokens().size));
  f.tokens().copy(0, f.tokens().size, v.data());
  return Ids(v.begin(), v.end());
}

}  // namespace

TEST(Tokenizer, BpeMergesByRankLeftmostFirst) {
  const json j = bpe_json();
  EXPECT_EQ(encode(j, "abc"), (Ids{5}));  // b+c (rank 0) first, then a+bc
  EXPECT_EQ(encode(j, "abab"), (Ids{3, 3}));
  EXPECT_EQ(encode(j, "abc  abab\t"), (Ids{5, 3, 3}));
  EXPECT_EQ(encode(j, "ab<s>ab"), (Ids{3, 7, 3}));  // the special token cut out first
  EXPECT_EQ(encode(j, "axxb"), (Ids{0, 6, 6, 1}));  // unknown characters: one unk each
  json fused = j;
  fused["model"]["fuse_unk"] = true;
  EXPECT_EQ(encode(fused, "axxb"), (Ids{0, 6, 1}));
  json no_unk = j;
  no_unk["model"]["unk_token"] = nullptr;
  EXPECT_EQ(encode(no_unk, "axxb"), (Ids{3}));  // dropped, as `tokenizers` drops them
  json fallback = j;
  fallback["model"]["byte_fallback"] = true;
  fallback["model"]["vocab"]["<0x78>"] = 8;  // "x"
  EXPECT_EQ(encode(fallback, "axxb"), (Ids{0, 8, 8, 1}));
  EXPECT_EQ(encode(fallback, "ayb"), (Ids{0, 6, 1}));  // no <0x79>: unk
  EXPECT_EQ(data::Tokenizer::parse(j.dump(), "t").vocab_size(), 8u);
}

TEST(Tokenizer, ByteLevelBpeReadsBytesThroughGpt2Map) {
  // Every byte its own token (ids = the byte), one merge: "Ġ" + "t" (" t").
  json j = bpe_json();
  json vocab = json::object();
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    vocab[s] = b;
  }
  vocab["\xC4\xA0t"] = 256;  // "Ġt"
  j["model"]["vocab"] = vocab;
  j["model"]["merges"] = json::array({json::array({"\xC4\xA0", "t"})});
  j["model"]["unk_token"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["added_tokens"] = json::array();
  EXPECT_EQ(encode(j, "a t"), (Ids{'a', 256}));
  EXPECT_EQ(encode(j, "a  t"), (Ids{'a', ' ', 256}));  // the run's last space leads the word
  EXPECT_EQ(encode(j, "\xC3\xA9"), (Ids{0xC3, 0xA9}));  // é: its two bytes
  j["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(encode(j, "t"), (Ids{256}));
  j["model"]["vocab"].erase("z");
  EXPECT_EQ(encode(j, "tz"), (Ids{256}));  // a byte not in the vocabulary, no unk: dropped
}

TEST(Tokenizer, WordPieceWithBertNormalizer) {
  const json j = wordpiece_json();
  EXPECT_EQ(encode(j, "UNAFFABLE hello!"), (Ids{1, 2, 3, 4, 5}));
  EXPECT_EQ(encode(j, "H\xC3\xA9llo"), (Ids{4}));              // Héllo: accent stripped, lowercased
  EXPECT_EQ(encode(j, "hel\xE2\x80\x8Blo"), (Ids{4}));         // a zero-width space (Cf) removed
  EXPECT_EQ(encode(j, "xyz un\xE4\xB8\xAD"), (Ids{0, 1, 6}));  // CJK split off; unknown word -> [UNK]
  EXPECT_EQ(encode(j, "unaffableaff"), (Ids{1, 2, 3, 2}));     // 12 characters: still pieces
  EXPECT_EQ(encode(j, "unaffableaffx"), (Ids{0}));             // 13 > max_input_chars_per_word
}

TEST(Tokenizer, InvalidUtf8NamesTheOffset) {
  const std::string bad = std::string("abc ab") + '\xFF' + "c";
  const std::string e = error_of([&] { data::Tokenizer::parse(bpe_json().dump(), "t").encode(bad, "IN 'x.txt'"); });
  EXPECT_NE(e.find("IN 'x.txt': not valid UTF-8"), std::string::npos) << e;
  EXPECT_NE(e.find("offset 6"), std::string::npos) << e;
}

TEST(Tokenizer, RefusesWhatItDoesNotImplementNamingTheKey) {
  const auto refusal = [](json j) { return error_of([&] { data::Tokenizer::parse(j.dump(), "tokenizer 'f.json'"); }); };
  struct Case {
    std::vector<std::string> path;
    json value;
    std::string key;
  };
  const std::vector<Case> cases = {
      {{"model", "type"}, "Unigram", "model.type 'Unigram'"},
      {{"model", "dropout"}, 0.1, "model.dropout"},
      {{"model", "byte_fallback"}, "yes", "model.byte_fallback"},
      {{"model", "cache_capacity"}, 5, "model.cache_capacity"},
      {{"model", "unk_token"}, 3, "model.unk_token"},
      {{"normalizer"}, {{"type", "NFKC"}}, "normalizer.type 'NFKC'"},
      {{"normalizer"}, {{"type", "BertNormalizer"}, {"lowercase", true}, {"extra", 1}}, "normalizer.extra"},
      {{"pre_tokenizer"}, {{"type", "Metaspace"}}, "pre_tokenizer.type 'Metaspace'"},
      {{"pre_tokenizer"}, {{"type", "ByteLevel"}, {"use_regex", 1}}, "pre_tokenizer.use_regex"},
      {{"truncation"}, {{"max_length", 3}}, "truncation"},
      {{"padding"}, {{"strategy", "BatchLongest"}}, "padding"},
      {{"something_new"}, 1, "tokenizer.something_new"},
  };
  for (const Case& c : cases) {
    json j = bpe_json();
    json* node = &j;
    for (size_t k = 0; k + 1 < c.path.size(); ++k) node = &(*node)[c.path[k]];
    (*node)[c.path.back()] = c.value;
    const std::string e = refusal(j);
    EXPECT_NE(e.find("tokenizer 'f.json'"), std::string::npos) << e;
    EXPECT_NE(e.find(c.key), std::string::npos) << c.key << ": " << e;
  }
  json merge = bpe_json();
  merge["model"]["merges"][1] = json::array({"a", "zz"});
  EXPECT_NE(refusal(merge).find("model.merges[1]: 'zz' is not in model.vocab"), std::string::npos) << refusal(merge);
  json id = bpe_json();
  id["model"]["vocab"]["a"] = int64_t{1} << 32;
  EXPECT_NE(refusal(id).find("model.vocab['a']"), std::string::npos) << refusal(id);
  json added = bpe_json();
  added["added_tokens"][0]["id"] = -1;
  EXPECT_NE(refusal(added).find("added_tokens[0].id"), std::string::npos) << refusal(added);
  json unk = wordpiece_json();
  unk["model"]["unk_token"] = "<unk>";
  EXPECT_NE(refusal(unk).find("model.unk_token '<unk>' is not in model.vocab"), std::string::npos);
  EXPECT_NE(refusal(json::array()).find("not a tokenizer.json"), std::string::npos);
  EXPECT_NE(error_of([] { data::Tokenizer::parse("{", "tokenizer 'f.json'"); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([] { data::Tokenizer::load("/nonexistent/tokenizer.json"); }).find("/nonexistent/tokenizer.json"),
            std::string::npos);
}

TEST(TokenWriter, FilesLoadInTheReader) {
  TempDir dir("tokenizer_write");
  const std::string p16 = dir / "a.bin", p32 = dir / "b.bin";
  const Ids narrow = {0, 1, 65535, 7, 42};
  data::write_token_file(p16, narrow, 65536);
  EXPECT_EQ(data::TokenFile::open(p16).format(), "llm.c uint16");
  EXPECT_EQ(read_back(p16), narrow);
  const Ids wide = {0, 65536, 69999, 3};
  data::write_token_file(p32, wide, 70000);
  EXPECT_EQ(data::TokenFile::open(p32).format(), "llm.c uint32");
  EXPECT_EQ(read_back(p32), wide);
  data::write_token_file(p32, narrow, 70000);  // replaces its own kind of file
  EXPECT_EQ(read_back(p32), narrow);
  const Ids text = data::Tokenizer::parse(bpe_json().dump(), "t").encode("abc abab ab<s>ab");
  data::write_token_file(p16, text, 8);
  EXPECT_EQ(read_back(p16), text);
  EXPECT_EQ(data::TokenCorpus::load(p16).train_size() + data::TokenCorpus::load(p16).val_size(), 6);
}

TEST(TokenWriter, RefusalsLeaveTheOutputUntouched) {
  TempDir dir("tokenizer_refuse");
  const std::string out = dir / "out.bin";
  data::write_token_file(out, {1, 2, 3}, 10);
  const std::string before = slurp(out);
  EXPECT_NE(error_of([&] { data::write_token_file(out, {}, 10); }).find("no tokens"), std::string::npos);
  EXPECT_NE(error_of([&] { data::write_token_file(out, {1, 10}, 10); }).find("token 1 is id 10"), std::string::npos);
  EXPECT_NE(error_of([&] { data::write_token_file(out, {1}, (uint64_t{1} << 32) + 1); }).find("uint32"),
            std::string::npos);
  EXPECT_EQ(slurp(out), before);
  const std::string link = dir / "link.bin";
  fs::create_symlink(out, link);
  EXPECT_NE(error_of([&] { data::write_token_file(link, {4, 5}, 10); }).find("symbolic link"), std::string::npos);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(slurp(out), before);
  const std::string notes = dir.write("notes.txt", "not tokens");
  EXPECT_NE(error_of([&] { data::write_token_file(notes, {4}, 10); }).find("not written by mantissa"), std::string::npos);
  EXPECT_EQ(slurp(notes), "not tokens");
  fs::create_directory(dir / "sub");
  EXPECT_NE(error_of([&] { data::write_token_file(dir / "sub", {4}, 10); }).find("not a regular file"),
            std::string::npos);
  for (const auto& e : fs::directory_iterator(dir.path))  // no temporary file left behind
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
}
