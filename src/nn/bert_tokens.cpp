// The special ids of a transformers BERT directory, read from its tokenizer
// files into config.json's "mantissa" section (bert.hpp:
// bert_config_with_special_ids).
#include <filesystem>
#include <sstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "mantissa/io/untrusted.hpp"
#include "mantissa/nn/bert.hpp"

namespace mantissa::nn {

namespace {

constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{256} << 20;

// The parsed JSON of dir/name, or null when the file is absent.
nlohmann::json read_json(const std::string& dir, const char* name) {
  const std::string path = dir + "/" + name;
  if (!std::filesystem::is_regular_file(path)) return nullptr;
  return io::parse_json(io::read_bounded(path, kMaxTokenizerFileBytes), path);
}

// A special token's name: a string, or an AddedToken object {"content": ...}.
std::optional<std::string> token_name(const nlohmann::json& files, const char* role) {
  std::optional<std::string> name;
  for (const nlohmann::json& f : files) {  // later files override earlier ones
    if (!f.is_object() || !f.contains(role)) continue;
    const nlohmann::json& v = f[role];
    if (v.is_string()) name = v.get<std::string>();
    else if (v.is_object() && v.contains("content") && v["content"].is_string()) name = v["content"].get<std::string>();
  }
  return name;
}

// The id of token `name`: tokenizer.json's added tokens, then its model's
// vocab; tokenizer_config.json's added_tokens_decoder; vocab.txt's lines.
std::optional<int64_t> token_id(const std::string& dir, const nlohmann::json& tokenizer, const nlohmann::json& config,
                                const std::string& name) {
  if (tokenizer.is_object()) {
    if (tokenizer.contains("added_tokens") && tokenizer["added_tokens"].is_array())
      for (const auto& t : tokenizer["added_tokens"])
        if (io::string_or_empty(t, "content") == name && t.contains("id") && t["id"].is_number_integer())
          return t["id"].get<int64_t>();
    if (tokenizer.contains("model") && tokenizer["model"].is_object() && tokenizer["model"].contains("vocab") &&
        tokenizer["model"]["vocab"].is_object()) {
      const auto& vocab = tokenizer["model"]["vocab"];
      if (auto it = vocab.find(name); it != vocab.end() && it->is_number_integer()) return it->get<int64_t>();
    }
  }
  if (config.is_object() && config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object())
    for (const auto& [id, t] : config["added_tokens_decoder"].items())
      if (io::string_or_empty(t, "content") == name) {
        try {
          return std::stoll(id);
        } catch (const std::exception&) {
          throw std::invalid_argument(dir + "/tokenizer_config.json: added_tokens_decoder key '" + id + "' is not an id");
        }
      }
  const std::string vocab_path = dir + "/vocab.txt";
  if (!std::filesystem::is_regular_file(vocab_path)) return std::nullopt;
  std::istringstream vocab_txt(io::read_bounded(vocab_path, kMaxTokenizerFileBytes));
  std::string line;
  for (int64_t i = 0; std::getline(vocab_txt, line); ++i)
    if (line == name || (line.ends_with('\r') && line.substr(0, line.size() - 1) == name)) return i;
  return std::nullopt;
}

}  // namespace

std::string bert_config_with_special_ids(const std::string& config_json, const std::string& dir) {
  nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
  if (!j.is_object() || j.value("model_type", "") != "bert") return config_json;
  nlohmann::json& m = j["mantissa"];
  if (m.is_null()) m = nlohmann::json::object();
  if (!m.is_object() || m.contains("byte_vocab")) return config_json;  // mantissa's byte-level layout
  const nlohmann::json tokenizer = read_json(dir, "tokenizer.json");
  const nlohmann::json tok_config = read_json(dir, "tokenizer_config.json");
  const nlohmann::json names = nlohmann::json::array({read_json(dir, "special_tokens_map.json"), tok_config});
  struct Role {
    const char *role, *key, *bert;
  };
  bool added = false;
  for (const Role& r : {Role{"cls_token", "cls_token_id", "[CLS]"}, Role{"sep_token", "sep_token_id", "[SEP]"},
                        Role{"mask_token", "mask_token_id", "[MASK]"}, Role{"pad_token", "", "[PAD]"}}) {
    if (*r.key && m.contains(r.key)) continue;
    const std::string name = token_name(names, r.role).value_or(r.bert);
    const std::optional<int64_t> id = token_id(dir, tokenizer, tok_config, name);
    if (!id) continue;
    if (*r.key) {
      m[r.key] = *id;
      added = true;
    } else if (j.contains("pad_token_id") && j["pad_token_id"].is_number_integer() && j["pad_token_id"].get<int64_t>() != *id) {
      throw std::invalid_argument(dir + ": config.json's pad_token_id " + j["pad_token_id"].dump() +
                                  " is not the id of the tokenizer's padding token " + name + " (" +
                                  std::to_string(*id) + "); mantissa masks the keys of pad_token_id");
    }
  }
  return added ? j.dump(2) : config_json;
}

}  // namespace mantissa::nn
