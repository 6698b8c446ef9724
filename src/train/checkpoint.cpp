#include "mantissa/train/checkpoint.hpp"
#include "mantissa/train/finite.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "mantissa/io/files.hpp"
#include "mantissa/io/model_dir.hpp"
#include "mantissa/io/untrusted.hpp"

namespace mantissa::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kConfigFile = "config.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kOptimizerJson = "optimizer.json";
constexpr const char* kTrainerFile = "trainer_state.json";
constexpr const char* kComplete = "COMPLETE";
constexpr const char* kExtraPrefix = "extra.";
// DIR.prev: the checkpoint a save replaced, kept as the fallback of a
// corrupt DIR.
constexpr const char* kPrevSuffix = ".prev";
// Created first in a save's temporary directory and removed just before it
// is renamed into place: a leftover carrying it is a save that was killed.
constexpr const char* kPartial = ".mantissa-partial";
// Every name a checkpoint directory may hold; a manifest naming anything
// else is refused, and cleanup deletes nothing else.
constexpr const char* kKnownFiles[] = {kModelFile, kConfigFile, kOptimizerFile, kOptimizerJson, kTrainerFile};

bool known_file(const std::string& name) {
  for (const char* k : kKnownFiles)
    if (name == k) return true;
  return false;
}
// Buffers of Hugging Face GPT-2 files that are not parameters (the causal
// mask); a file holding them still loads.
constexpr const char* kHfBufferSuffixes[] = {".attn.bias", ".attn.masked_bias"};

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// Parameters as stored: a parameter sharing storage with an earlier one (a
// tied head) is not stored, as in Hugging Face GPT-2 files.
std::vector<autograd::Parameter*> stored_parameters(nn::Model& model) {
  std::vector<autograd::Parameter*> out;
  for (autograd::Parameter* p : model.parameters()) {
    bool tied = false;
    for (const autograd::Parameter* q : out) tied = tied || q->value.same_storage(p->value);
    if (!tied) out.push_back(p);
  }
  return out;
}

std::string model_bytes(nn::Model& model) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (autograd::Parameter* p : stored_parameters(model)) tensors.emplace_back(p->name, p->value);
  // "format": "pt" is what Hugging Face transformers expects of a PyTorch-layout file.
  return io::encode_safetensors(tensors, {{"format", "pt"}});
}

std::string config_bytes(nn::Model& model) {
  const std::string cfg = model.config_json();
  try {
    return nlohmann::json::parse(cfg).dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    throw std::logic_error("model.config_json() is not valid JSON: " + std::string(e.what()));
  }
}

// widen_16bit: a model directory (a Hugging Face save) may hold F16/BF16
// weights, widened exactly; a mantissa checkpoint holds exactly what it saved.
void apply_model_weights(const io::SafetensorsFile& file, const std::string& file_name, nn::Model& model,
                         bool widen_16bit) {
  std::vector<std::pair<std::string, Tensor*>> dst;
  auto params = stored_parameters(model);
  for (autograd::Parameter* p : params) dst.emplace_back(p->name, &p->value);
  io::SafetensorsFile filtered;
  filtered.metadata = file.metadata;
  // A file saved from the base model names its tensors without the prefix.
  const std::string prefix = model.base_prefix();
  bool prefixed = prefix.empty();
  for (const auto& entry : file.tensors) prefixed = prefixed || entry.first.rfind(prefix, 0) == 0;
  for (const auto& [name, t] : file.tensors) {
    bool buffer = false;
    for (const char* suffix : kHfBufferSuffixes)
      buffer = buffer || (name.size() > std::strlen(suffix) && name.ends_with(suffix));
    if (!buffer) filtered.tensors.emplace(prefixed ? name : prefix + name, t);
  }
  io::load_into(filtered, file_name, dst, /*allow_extra=*/false, widen_16bit);
  for (autograd::Parameter* p : model.parameters()) ++p->version;
}

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string parent_of(const std::string& dir) {
  fs::path p = fs::path(dir).parent_path();
  return p.empty() ? "." : p.string();
}

// Sibling directories DIR.<tag>-* (left by interrupted saves).
std::vector<fs::path> siblings(const std::string& dir, const std::string& tag) {
  std::vector<fs::path> out;
  const fs::path d = fs::path(dir).lexically_normal();
  const std::string prefix = d.filename().string() + "." + tag + "-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent_of(d.string()), ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path());
  return out;
}

// "a/b/", "a/b/." and "a/./b" all name a/b; a path without a final name
// ("", ".", "..", "/") cannot be saved to (its siblings are not beside it).
std::string without_trailing_slash(const std::string& dir_in) {
  std::string dir = fs::path(dir_in).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

bool has_final_name(const std::string& dir) {
  const std::string name = fs::path(dir).filename().string();
  return !name.empty() && name != "." && name != ".." && dir != "/";
}

// dir's COMPLETE is a mantissa checkpoint manifest.
bool is_checkpoint(const std::string& dir) {
  try {
    const auto m = nlohmann::json::parse(io::read_file(join(dir, kComplete)));
    return io::string_or_empty(m, "format") == "mantissa-checkpoint";
  } catch (const std::exception&) {
    return false;
  }
}

// Deletes what a save writes into dir (only those names, and their
// temporaries left by a killed write), then dir itself if that left it
// empty: anything else found inside is kept.
void remove_owned(const std::string& dir) {
  std::vector<std::string> names(std::begin(kKnownFiles), std::end(kKnownFiles));
  names.push_back(kComplete);
  names.push_back(kPartial);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    bool ours = false;
    for (const std::string& k : names) ours = ours || n == k || n.rfind(k + ".tmp-", 0) == 0;
    if (ours && !e.is_directory(ec)) ::unlink(e.path().c_str());
  }
  ::rmdir(dir.c_str());
}

bool is_symlink(const std::string& path) {
  std::error_code ec;
  return fs::is_symlink(fs::symlink_status(path, ec));
}

// The directory that holds the checkpoint: dir if complete, else (dir
// missing) the most recent complete DIR.old-* left by a save interrupted
// between its two renames. Empty if none.
std::string resolve(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(join(dir, kComplete), ec)) return dir;
  if (fs::exists(dir, ec)) return {};
  std::string best;
  fs::file_time_type best_time{};
  for (const fs::path& p : siblings(dir, "old")) {
    const auto marker = p / kComplete;
    if (!fs::exists(marker, ec)) continue;
    auto t = fs::last_write_time(marker, ec);
    if (best.empty() || t > best_time) best = p.string(), best_time = t;
  }
  return best;
}

// The inode behind path (0 if none): a save replaces a checkpoint directory
// by exchanging inodes under its name.
uint64_t directory_identity(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// The files the manifest lists (only `only`, if given), each checked
// against its size and CRC-32.
std::map<std::string, std::string> read_verified(const std::string& dir, const char* only = nullptr) {
  const std::string marker = join(dir, kComplete);
  nlohmann::json manifest;
  try {
    manifest = io::parse_json(io::read_file(marker), "manifest");
  } catch (const std::exception& e) {
    throw io::FormatError(marker + ": unreadable checkpoint manifest: " + e.what());
  }
  if (io::string_or_empty(manifest, "format") != "mantissa-checkpoint" || !manifest.contains("files") ||
      !manifest["files"].is_object())
    throw io::FormatError(marker + ": not a mantissa checkpoint manifest");
  std::map<std::string, std::string> files;
  for (const auto& [name, info] : manifest["files"].items()) {
    if (!known_file(name))
      throw io::FormatError(marker + ": names '" + name + "', which is not a checkpoint file (expected only " +
                        kModelFile + ", " + kConfigFile + ", " + kOptimizerFile + ", " + kOptimizerJson + ", " +
                        kTrainerFile + ")");
    if (!info.is_object() || !info.contains("bytes") || !info["bytes"].is_number_unsigned() ||
        !info.contains("crc32") || !info["crc32"].is_number_unsigned())
      throw io::FormatError(marker + ": entry '" + name + "' lacks unsigned \"bytes\" and \"crc32\"");
    if (only && name != only) continue;
    const std::string path = join(dir, name);
    if (is_symlink(path)) throw io::FormatError(path + ": is a symbolic link (a checkpoint holds only regular files)");
    std::string bytes;
    try {
      bytes = io::read_file(path);
    } catch (const std::invalid_argument& e) {
      throw io::FormatError(std::string("checkpoint file missing: ") + e.what());
    }
    const auto want_bytes = info["bytes"].get<uint64_t>();
    const auto want_crc = info["crc32"].get<uint64_t>();
    if (bytes.size() != want_bytes)
      throw io::FormatError(path + ": " + std::to_string(bytes.size()) + " bytes but the checkpoint manifest says " +
                        std::to_string(want_bytes) + (bytes.size() < want_bytes ? " (truncated)" : ""));
    if (io::crc32(bytes.data(), bytes.size()) != want_crc)
      throw io::FormatError(path + ": CRC-32 does not match the checkpoint manifest (corrupt file)");
    files.emplace(name, std::move(bytes));
  }
  if (only && !files.count(only)) throw io::FormatError(marker + ": does not list " + only);
  return files;
}

std::string not_loadable(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return "checkpoint directory '" + dir + "' does not exist";
  return "'" + dir + "' is not a complete checkpoint (no " + std::string(kComplete) +
         " marker: the save was interrupted, or it holds only a saved model)";
}

// Everything a load checks before using a checkpoint: the manifest, each
// file's size and CRC-32, the weights and optimizer state decoded and finite.
void verify_checkpoint(const std::string& where) {
  const std::map<std::string, std::string> files = read_verified(where);
  if (!files.count(kModelFile)) throw io::FormatError(join(where, kModelFile) + ": missing from the checkpoint manifest");
  for (const char* name : {kModelFile, kOptimizerFile}) {
    const auto it = files.find(name);
    if (it == files.end()) continue;
    const std::string path = join(where, name);
    const io::SafetensorsFile f = io::decode_safetensors(it->second, path, MemoryKind::workspace);
    for (const auto& [tensor, t] : f.tensors)
      if (!all_finite(t)) throw io::FormatError(path + ": tensor '" + tensor + "' holds non-finite values (refused)");
  }
}

// The step recorded in where's trainer state, or -1.
int64_t recorded_step(const std::string& where) {
  try {
    const auto j = io::parse_json(io::read_file(join(where, kTrainerFile)), kTrainerFile);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) return j["step"].get<int64_t>();
  } catch (const std::exception&) {
  }
  return -1;
}

// After a save, old holds the checkpoint it replaced. Kept as DIR.prev if it
// still verifies and DIR.prev is missing or a mantissa checkpoint (never a
// link, a file or a user's directory: then nothing there is touched);
// otherwise its checkpoint files are removed.
void keep_as_previous(const std::string& old, const std::string& dir) {
  const std::string prev = dir + kPrevSuffix;
  bool good = true;
  try {
    read_verified(old);
  } catch (const std::exception&) {
    good = false;
  }
  std::error_code ec;
  const auto st = fs::symlink_status(prev, ec);
  if (good && !fs::exists(st)) {
    if (std::rename(old.c_str(), prev.c_str()) == 0) return;
  } else if (good && fs::is_directory(st) && is_checkpoint(prev)) {
    if (::renameat2(AT_FDCWD, old.c_str(), AT_FDCWD, prev.c_str(), RENAME_EXCHANGE) == 0) {
      // old now names the older previous checkpoint; if prev was swapped
      // for something else since the check, put it back untouched.
      if (is_symlink(old) || !is_checkpoint(old))
        ::renameat2(AT_FDCWD, old.c_str(), AT_FDCWD, prev.c_str(), RENAME_EXCHANGE);
      remove_owned(old);
      return;
    }
    // No atomic exchange on this file system: DIR (just saved) stays the
    // good checkpoint while the older DIR.prev is removed.
    remove_owned(prev);
    if (std::rename(old.c_str(), prev.c_str()) == 0) return;
  }
  remove_owned(old);
}

}  // namespace

void save_model(const std::string& dir, nn::Model& model) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create directory '" + dir + "': " + ec.message());
  io::write_file_atomic(join(dir, kModelFile), model_bytes(model));
  io::write_file_atomic(join(dir, kConfigFile), config_bytes(model));
}

void load_model_weights(const std::string& dir, nn::Model& model) {
  // A checkpoint (COMPLETE present) is verified like a resume: sizes and CRC-32.
  if (const std::string where = resolve(without_trailing_slash(dir)); !where.empty()) {
    const std::map<std::string, std::string> files = read_verified(where);
    const std::string path = join(where, kModelFile);
    const auto it = files.find(kModelFile);
    if (it == files.end()) throw io::FormatError(path + ": missing from the checkpoint manifest");
    apply_model_weights(io::decode_safetensors(it->second, path), path, model, false);
    return;
  }
  // A Hugging Face directory: one model.safetensors or its shards.
  apply_model_weights(io::read_model_dir(dir), io::model_dir_weights_path(dir), model, true);
}

std::string read_model_config(const std::string& dir) {
  const std::string resolved = resolve(without_trailing_slash(dir));
  const std::string path = join(resolved.empty() ? dir : resolved, kConfigFile);
  std::string text;
  if (!resolved.empty()) {
    // A checkpoint: the config must match its manifest before a model is
    // built from it.
    text = read_verified(resolved, kConfigFile).at(kConfigFile);
  } else {
    try {
      text = io::read_file(path);
    } catch (const std::invalid_argument& e) {
      throw io::FormatError(std::string("model config: ") + e.what());
    }
  }
  try {
    io::parse_json(text, path);
  } catch (const std::invalid_argument& e) {
    throw io::FormatError(e.what());
  }
  return text;
}

void check_checkpoint_target(const std::string& dir_in, const std::string& flag) {
  const std::string dir = without_trailing_slash(dir_in);
  const std::string refuse = flag + " '" + dir_in + "' ";
  if (!has_final_name(dir)) throw std::invalid_argument(refuse + "does not name a directory to save into");
  std::error_code ec;
  const auto st = fs::symlink_status(dir, ec);
  if (fs::exists(st)) {
    const std::string advice = "; mantissa replaces only its own checkpoints: choose another path, or remove it yourself";
    if (fs::is_symlink(st)) throw std::invalid_argument(refuse + "is a symbolic link" + advice);
    if (!fs::is_directory(st)) throw std::invalid_argument(refuse + "exists and is not a directory" + advice);
    if (!fs::is_empty(dir, ec) && !is_checkpoint(dir))
      throw std::invalid_argument(refuse + "exists and is not a mantissa checkpoint (no " + kComplete + " manifest)" +
                                  advice);
  }
  io::check_writable_directory(parent_of(dir), flag);
}

void save_checkpoint(const std::string& dir_in, nn::Model& model, const optim::Optimizer* optimizer,
                     const std::string& trainer_state, const std::map<std::string, Tensor>& extra_tensors) {
  const std::string dir = without_trailing_slash(dir_in);
  check_checkpoint_target(dir, "checkpoint directory");
  std::error_code ec;
  // Leftovers of saves that were killed (they carry the partial marker):
  // never the live checkpoint, never a directory mantissa did not make.
  // (A save killed before it marked its directory left it empty: rmdir
  // removes only an empty one.)
  for (const fs::path& p : siblings(dir, "tmp")) {
    if (is_symlink(p.string())) continue;
    if (fs::exists(p / kPartial, ec)) remove_owned(p.string());
    else ::rmdir(p.c_str());
  }
  fs::create_directories(parent_of(dir), ec);
  const std::string tmp = io::unique_sibling(dir, "tmp");
  if (::mkdir(tmp.c_str(), 0755) != 0)
    throw std::runtime_error("cannot create directory '" + tmp + "': " + std::strerror(errno));
  io::write_file_atomic(join(tmp, kPartial), "");

  std::map<std::string, std::string> files;
  files[kModelFile] = model_bytes(model);
  files[kConfigFile] = config_bytes(model);
  files[kTrainerFile] = trainer_state;
  if (optimizer || !extra_tensors.empty()) {
    std::vector<std::pair<std::string, Tensor>> state;
    if (optimizer)
      for (const auto& [name, t] : optimizer->state_tensors()) state.emplace_back(name, t);
    for (const auto& [name, t] : extra_tensors) state.emplace_back(kExtraPrefix + name, t);
    files[kOptimizerFile] = io::encode_safetensors(state);
  }
  if (optimizer) files[kOptimizerJson] = optimizer->state_json();

  nlohmann::json manifest = {{"format", "mantissa-checkpoint"}, {"version", 1}, {"files", nlohmann::json::object()}};
  for (const auto& [name, bytes] : files) {
    io::write_file_atomic(join(tmp, name), bytes);
    manifest["files"][name] = {{"bytes", bytes.size()}, {"crc32", io::crc32(bytes.data(), bytes.size())}};
  }
  // COMPLETE last: a directory without it is never loaded.
  io::write_file_atomic(join(tmp, kComplete), manifest.dump(2) + "\n");
  ::unlink(join(tmp, kPartial).c_str());
  fsync_path(tmp, true);

  // rename() replaces a missing or empty directory in one step; a previous
  // checkpoint is exchanged with the new one.
  if (std::rename(tmp.c_str(), dir.c_str()) != 0) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
      // tmp now names what was at dir: checked above to be a checkpoint; if
      // it was swapped for something else since, put it back untouched.
      if (is_symlink(tmp) || !is_checkpoint(tmp)) {
        ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE);
        throw std::runtime_error("'" + dir + "' changed during the save and is no longer a mantissa checkpoint; left as it was");
      }
      keep_as_previous(tmp, dir);
    } else {
      // No atomic exchange on this file system: move the old one aside
      // first; load_checkpoint falls back to DIR.old-* while DIR is missing.
      const std::string old = io::unique_sibling(dir, "old");
      if (std::rename(dir.c_str(), old.c_str()) != 0)
        throw std::runtime_error("cannot rename '" + dir + "' to '" + old + "': " + std::strerror(errno));
      fsync_path(parent_of(dir), true);
      if (std::rename(tmp.c_str(), dir.c_str()) != 0)
        throw std::runtime_error("cannot rename '" + tmp + "' to '" + dir + "': " + std::strerror(errno));
      fsync_path(parent_of(dir), true);
      keep_as_previous(old, dir);
    }
  }
  fsync_path(parent_of(dir), true);
  for (const fs::path& p : siblings(dir, "old"))
    if (!is_symlink(p.string()) && is_checkpoint(p.string())) remove_owned(p.string());
}

CheckpointData load_checkpoint(const std::string& dir_in, nn::Model& model, optim::Optimizer* optimizer) {
  const std::string dir = without_trailing_slash(dir_in);
  std::string where;
  std::map<std::string, std::string> files;
  // A save running in another process exchanges the directory behind DIR
  // between the reads of its manifest and its files; the files then belong
  // to two checkpoints. Such a read is retried; a checkpoint that stays put
  // and still fails is corrupt.
  for (int attempt = 0;; ++attempt) {
    where = resolve(dir);
    if (where.empty()) throw io::FormatError(not_loadable(dir));
    const auto before = directory_identity(where);
    try {
      files = read_verified(where);
      break;
    } catch (const io::FormatError&) {
      if (attempt >= 8 || directory_identity(where) == before) throw;
    }
  }
  auto need = [&](const char* name) -> const std::string& {
    auto it = files.find(name);
    if (it == files.end()) throw io::FormatError(join(where, name) + ": missing from the checkpoint");
    return it->second;
  };
  const std::string model_path = join(where, kModelFile);
  io::SafetensorsFile weights = io::decode_safetensors(need(kModelFile), model_path);
  io::SafetensorsFile state;
  if (files.count(kOptimizerFile))
    state = io::decode_safetensors(files[kOptimizerFile], join(where, kOptimizerFile), MemoryKind::optimizer_state);

  CheckpointData out;
  out.trainer_state = need(kTrainerFile);
  std::map<std::string, Tensor> optimizer_tensors;
  for (auto& [name, t] : state.tensors) {
    if (name.rfind(kExtraPrefix, 0) == 0) out.extra_tensors.emplace(name.substr(std::strlen(kExtraPrefix)), t);
    else optimizer_tensors.emplace(name, t);
  }
  apply_model_weights(weights, model_path, model, false);
  if (optimizer) {
    const std::string& json = need(kOptimizerJson);
    try {
      optimizer->load_state(optimizer_tensors, json);
    } catch (const std::invalid_argument& e) {
      throw io::FormatError(join(where, kOptimizerFile) + ": " + e.what());
    }
  }
  return out;
}

bool all_finite(const Tensor& t) {
  if (!t.defined() || t.dtype() == DType::i32) return true;
  if (!std::isfinite(t.scale()) || !(t.scale() > 0)) return false;
  const Tensor f = t.dtype() == DType::f32 ? t : t.to(DType::f32, MemoryKind::workspace);
  const float* v = f.f32();
  const int64_t n = f.numel();
  // Sum of x * 0: 0 if every x is finite, NaN otherwise; one vectorised pass.
  float acc = 0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) acc += v[i] * 0.0f;
  return acc == 0.0f;
}

CheckpointChoice choose_checkpoint(const std::string& dir_in, bool model_dir_ok) {
  const std::string dir = without_trailing_slash(dir_in);
  const std::string where = resolve(dir);
  std::string problem;
  if (where.empty()) {
    problem = not_loadable(dir);
  } else {
    try {
      verify_checkpoint(where);
      return {where, ""};
    } catch (const io::FormatError& e) {
      problem = e.what();
    }
  }
  // The fallback: only a DIR.prev that is a mantissa checkpoint (not a link).
  const std::string prev = dir + kPrevSuffix;
  if (is_symlink(prev) || !is_checkpoint(prev)) {
    if (where.empty() && model_dir_ok) return {dir, ""};  // a saved model, or an error the reader names
    throw io::FormatError(problem);
  }
  try {
    verify_checkpoint(prev);
  } catch (const io::FormatError& e) {
    throw io::FormatError(problem + "; the previous checkpoint '" + prev + "' is not usable either: " + e.what());
  }
  const int64_t step = recorded_step(prev);
  return {prev, "warning: checkpoint '" + dir + "' is not usable (" + problem + "); using the previous checkpoint '" +
                    prev + "'" + (step >= 0 ? " (step " + std::to_string(step) + ")" : std::string()) + " instead"};
}

bool checkpoint_exists(const std::string& dir) { return !resolve(without_trailing_slash(dir)).empty(); }

}  // namespace mantissa::train
