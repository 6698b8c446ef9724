#include "mantissa/io/model_dir.hpp"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "mantissa/io/untrusted.hpp"

namespace mantissa::io {

namespace {

namespace fs = std::filesystem;

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";
// An index names tensors and shard files; far below this even for 100B-parameter models.
constexpr uint64_t kMaxIndexBytes = 64ull << 20;
constexpr size_t kMaxShards = 100000;

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// A shard name from the index: a file directly inside the directory.
std::string checked_shard_name(const nlohmann::json& v, const std::string& tensor, const std::string& index) {
  if (!v.is_string()) throw FormatError(index + ": weight_map['" + excerpt(tensor) + "'] is not a file name");
  const std::string name = v.get<std::string>();
  const bool plain = !name.empty() && name.size() <= 255 && name.find('/') == std::string::npos &&
                     name.find('\\') == std::string::npos && name.find('\0') == std::string::npos &&
                     name != "." && name != ".." && name.ends_with(".safetensors");
  if (!plain)
    throw FormatError(index + ": weight_map['" + excerpt(tensor) + "'] is '" + excerpt(name) +
                      "', not the name of a .safetensors file in the same directory");
  return name;
}

SafetensorsFile read_sharded(const std::string& dir, MemoryKind kind) {
  const std::string index = join(dir, kIndex);
  nlohmann::json j;
  try {
    j = parse_json(read_bounded(index, kMaxIndexBytes), index);
  } catch (const FormatError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw FormatError(e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw FormatError(index + ": no \"weight_map\" object naming each tensor's shard");
  std::map<std::string, std::string> shard_of;  // tensor -> shard
  std::set<std::string> shards;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    shard_of[it.key()] = checked_shard_name(it.value(), it.key(), index);
    shards.insert(shard_of[it.key()]);
  }
  if (shards.empty()) throw FormatError(index + ": weight_map names no tensor");
  if (shards.size() > kMaxShards)
    throw FormatError(index + ": " + std::to_string(shards.size()) + " shards (at most " +
                      std::to_string(kMaxShards) + ")");
  SafetensorsFile out;
  for (const std::string& shard : shards) {
    const std::string path = join(dir, shard);
    SafetensorsFile part = load_safetensors(path, kind);
    for (auto& [name, t] : part.tensors) {
      const auto where = shard_of.find(name);
      if (where == shard_of.end())
        throw FormatError(path + ": tensor '" + excerpt(name) + "' is not in " + kIndex);
      if (where->second != shard)
        throw FormatError(path + ": tensor '" + excerpt(name) + "' is indexed in " + where->second);
      out.tensors.emplace(name, std::move(t));
    }
    if (out.metadata.empty()) out.metadata = std::move(part.metadata);
  }
  for (const auto& [name, shard] : shard_of)
    if (!out.tensors.count(name))
      throw FormatError(join(dir, shard) + ": tensor '" + excerpt(name) + "' is indexed here but missing");
  return out;
}

}  // namespace

std::string model_dir_weights_path(const std::string& dir) {
  const std::string single = join(dir, kSingle);
  if (!exists(single) && exists(join(dir, kIndex))) return join(dir, kIndex);
  return single;
}

SafetensorsFile read_model_dir(const std::string& dir, MemoryKind kind) {
  const std::string single = join(dir, kSingle);
  if (exists(single)) return load_safetensors(single, kind);
  if (exists(join(dir, kIndex))) return read_sharded(dir, kind);
  for (const char* pickle : {"pytorch_model.bin", "pytorch_model.bin.index.json"})
    if (exists(join(dir, pickle)))
      throw FormatError(dir + " holds " + pickle +
                        " (PyTorch's pickle format), which mantissa does not read: loading a pickle runs "
                        "code from the file. Save the model as safetensors (transformers: "
                        "model.save_pretrained(DIR, safe_serialization=True))");
  throw FormatError(single + ": no such file (nor " + kIndex + ")");
}

}  // namespace mantissa::io
