// tokenizer.json (the Hugging Face `tokenizers` serialisation) read into the
// components mantissa implements. Everything else is refused with the key
// named: a component tokenized differently would give other ids silently.
// post_processor and decoder are not read: ids are encoded without added
// special tokens (add_special_tokens=False), where neither changes them.
#include <algorithm>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "data/tokenizer_impl.hpp"
#include "mantissa/io/untrusted.hpp"

namespace mantissa::data::tok {

namespace {

using nlohmann::json;

// Largest id accepted: the vocabulary size (largest id + 1) fits a uint32.
constexpr int64_t kMaxId = int64_t{0xFFFFFFFE};

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw std::invalid_argument(where + ": " + what);
}

// Refuses an object holding a key outside `known` (a setting mantissa would ignore).
void only_keys(const json& obj, const std::string& where, const std::string& at,
               std::initializer_list<const char*> known) {
  for (const auto& item : obj.items()) {
    const bool ok = std::any_of(known.begin(), known.end(), [&](const char* k) { return item.key() == k; });
    if (!ok) fail(where, at + "." + io::excerpt(item.key()) + " is not implemented by mantissa (refused, not ignored)");
  }
}

bool get_bool(const json& obj, const char* key, bool fallback, const std::string& where, const std::string& at) {
  if (!obj.contains(key) || obj.at(key).is_null()) return fallback;
  if (!obj.at(key).is_boolean()) fail(where, at + "." + key + " must be true or false");
  return obj.at(key).get<bool>();
}

// A string, or "" for null / absent (the fallback).
std::string get_string(const json& obj, const char* key, const std::string& fallback, const std::string& where,
                       const std::string& at) {
  if (!obj.contains(key)) return fallback;
  if (obj.at(key).is_null()) return "";
  if (!obj.at(key).is_string()) fail(where, at + "." + key + " must be a string or null");
  return obj.at(key).get<std::string>();
}

const json& require_object(const json& parent, const char* key, const std::string& where) {
  if (!parent.contains(key)) fail(where, std::string(key) + " is missing");
  if (!parent.at(key).is_object()) fail(where, std::string(key) + " must be an object");
  return parent.at(key);
}

std::string type_of(const json& obj, const std::string& where, const std::string& at) {
  if (!obj.contains("type") || !obj.at("type").is_string()) fail(where, at + ".type is missing");
  return obj.at("type").get<std::string>();
}

uint32_t get_id(const json& v, const std::string& where, const std::string& at) {
  const int64_t id = io::as_integer(v, where + ": " + at);
  if (id < 0 || id > kMaxId) fail(where, at + " = " + std::to_string(id) + " is outside 0.." + std::to_string(kMaxId));
  return static_cast<uint32_t>(id);
}

Vocab read_vocab(const json& model, const std::string& where, uint64_t& vocab_size) {
  if (!model.contains("vocab") || !model.at("vocab").is_object()) fail(where, "model.vocab must be an object");
  Vocab vocab;
  vocab.reserve(model.at("vocab").size());
  for (const auto& [token, id] : model.at("vocab").items()) {
    const uint32_t v = get_id(id, where, "model.vocab['" + io::excerpt(token) + "']");
    vocab.emplace(token, v);
    vocab_size = std::max<uint64_t>(vocab_size, uint64_t{v} + 1);
  }
  return vocab;
}

void read_normalizer(const json& j, Spec& spec, const std::string& where) {
  if (!j.contains("normalizer") || j.at("normalizer").is_null()) return;
  const json& n = j.at("normalizer");
  if (!n.is_object()) fail(where, "normalizer must be an object or null");
  const std::string type = type_of(n, where, "normalizer");
  if (type != "BertNormalizer")
    fail(where, "normalizer.type '" + io::excerpt(type) +
                    "' is not implemented by mantissa (it implements BertNormalizer, or none)");
  only_keys(n, where, "normalizer", {"type", "clean_text", "handle_chinese_chars", "strip_accents", "lowercase"});
  BertNormalizerSpec& b = spec.normalizer;
  b.present = true;
  b.clean_text = get_bool(n, "clean_text", true, where, "normalizer");
  b.handle_chinese_chars = get_bool(n, "handle_chinese_chars", true, where, "normalizer");
  b.lowercase = get_bool(n, "lowercase", true, where, "normalizer");
  b.strip_accents = get_bool(n, "strip_accents", b.lowercase, where, "normalizer");  // null follows lowercase
}

void read_pre_tokenizer(const json& j, Spec& spec, const std::string& where) {
  if (!j.contains("pre_tokenizer") || j.at("pre_tokenizer").is_null()) return;
  const json& p = j.at("pre_tokenizer");
  if (!p.is_object()) fail(where, "pre_tokenizer must be an object or null");
  const std::string type = type_of(p, where, "pre_tokenizer");
  if (type == "ByteLevel") {
    only_keys(p, where, "pre_tokenizer", {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    spec.pre_tokenizer.kind = PreTokenizerKind::byte_level;
    spec.pre_tokenizer.add_prefix_space = get_bool(p, "add_prefix_space", true, where, "pre_tokenizer");
    spec.pre_tokenizer.use_regex = get_bool(p, "use_regex", true, where, "pre_tokenizer");
    get_bool(p, "trim_offsets", true, where, "pre_tokenizer");  // offsets only: checked, not used
  } else if (type == "BertPreTokenizer") {
    only_keys(p, where, "pre_tokenizer", {"type"});
    spec.pre_tokenizer.kind = PreTokenizerKind::bert;
  } else {
    fail(where, "pre_tokenizer.type '" + io::excerpt(type) +
                    "' is not implemented by mantissa (it implements ByteLevel, BertPreTokenizer, or none)");
  }
}

void read_bpe(const json& m, Spec& spec, const std::string& where) {
  only_keys(m, where, "model",
            {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
             "byte_fallback", "ignore_merges", "vocab", "merges"});
  if (m.contains("dropout") && !m.at("dropout").is_null() &&
      !(m.at("dropout").is_number() && m.at("dropout").get<double>() == 0.0))
    fail(where, "model.dropout must be null or 0 (BPE dropout is random; mantissa tokenizes deterministically)");
  BpeOptions opt;
  opt.unk_token = get_string(m, "unk_token", "", where, "model");
  opt.continuing_subword_prefix = get_string(m, "continuing_subword_prefix", "", where, "model");
  opt.end_of_word_suffix = get_string(m, "end_of_word_suffix", "", where, "model");
  opt.fuse_unk = get_bool(m, "fuse_unk", false, where, "model");
  opt.byte_fallback = get_bool(m, "byte_fallback", false, where, "model");
  opt.ignore_merges = get_bool(m, "ignore_merges", false, where, "model");
  Vocab vocab = read_vocab(m, where, spec.vocab_size);
  if (!m.contains("merges") || !m.at("merges").is_array()) fail(where, "model.merges must be an array");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(m.at("merges").size());
  size_t k = 0;
  for (const json& e : m.at("merges")) {
    const std::string at = "model.merges[" + std::to_string(k++) + "]";
    if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else if (e.is_string()) {  // the older form "a b": exactly one space
      const std::string s = e.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        fail(where, at + " '" + io::excerpt(s) + "' is not two tokens separated by one space");
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {
      fail(where, at + " must be a pair of strings");
    }
  }
  spec.bpe = std::make_unique<BpeModel>(std::move(vocab), merges, std::move(opt), where);
}

void read_wordpiece(const json& m, Spec& spec, const std::string& where) {
  only_keys(m, where, "model", {"type", "unk_token", "continuing_subword_prefix", "max_input_chars_per_word", "vocab"});
  const std::string unk = get_string(m, "unk_token", "[UNK]", where, "model");
  const std::string prefix = get_string(m, "continuing_subword_prefix", "##", where, "model");
  const int64_t max_chars = io::integer_or(m, "max_input_chars_per_word", 100, where + ": model.max_input_chars_per_word");
  if (max_chars < 0) fail(where, "model.max_input_chars_per_word must be >= 0");
  Vocab vocab = read_vocab(m, where, spec.vocab_size);
  spec.wordpiece = std::make_unique<WordPieceModel>(std::move(vocab), unk, prefix, static_cast<uint64_t>(max_chars), where);
}

void read_added_tokens(const json& j, Spec& spec, const std::string& where) {
  if (!j.contains("added_tokens") || j.at("added_tokens").is_null()) return;
  if (!j.at("added_tokens").is_array()) fail(where, "added_tokens must be an array");
  size_t k = 0;
  for (const json& t : j.at("added_tokens")) {
    const std::string at = "added_tokens[" + std::to_string(k++) + "]";
    if (!t.is_object()) fail(where, at + " must be an object");
    only_keys(t, where, at, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
    if (!t.contains("content") || !t.at("content").is_string() || t.at("content").get<std::string>().empty())
      fail(where, at + ".content must be a non-empty string");
    if (!t.contains("id")) fail(where, at + ".id is missing");
    AddedToken a;
    a.content = t.at("content").get<std::string>();
    a.id = get_id(t.at("id"), where, at + ".id");
    a.single_word = get_bool(t, "single_word", false, where, at);
    a.lstrip = get_bool(t, "lstrip", false, where, at);
    a.rstrip = get_bool(t, "rstrip", false, where, at);
    const bool special = get_bool(t, "special", false, where, at);
    a.normalized = get_bool(t, "normalized", !special, where, at);
    spec.vocab_size = std::max<uint64_t>(spec.vocab_size, uint64_t{a.id} + 1);
    spec.added.push_back(std::move(a));
  }
}

}  // namespace

Spec parse_spec(std::string_view json_text, const std::string& where) {
  const json j = io::parse_json(json_text, where);
  if (!j.is_object()) fail(where, "not a tokenizer.json (the top level is not an object)");
  only_keys(j, where, "tokenizer",
            {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor",
             "decoder", "model"});
  for (const char* key : {"truncation", "padding"})
    if (j.contains(key) && !j.at(key).is_null())
      fail(where, std::string(key) + " must be null (a corpus is tokenized whole, never cut or padded)");
  Spec spec;
  read_normalizer(j, spec, where);
  read_pre_tokenizer(j, spec, where);
  read_added_tokens(j, spec, where);
  const json& model = require_object(j, "model", where);
  spec.model_type = type_of(model, where, "model");
  if (spec.model_type == "BPE")
    read_bpe(model, spec, where);
  else if (spec.model_type == "WordPiece")
    read_wordpiece(model, spec, where);
  else
    fail(where, "model.type '" + io::excerpt(spec.model_type) +
                    "' is not implemented by mantissa (it implements BPE and WordPiece)");
  return spec;
}

}  // namespace mantissa::data::tok
