// A checkpoint directory from outside: the input's parts are the files
// model.safetensors, config.json, optimizer.safetensors, optimizer.json and
// trainer_state.json (in that order; an empty part is left out), and a
// COMPLETE manifest with their true sizes and CRC-32 (so the parsers behind
// the integrity check are reached), or the sixth part as a raw manifest.
// Loaded as `mantissa train --resume` and `mantissa eval` do, into a tiny GPT.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fuzz_util.hpp"
#include "mantissa/train/checkpoint.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/nn/gpt.hpp"
#include "mantissa/train/session.hpp"

namespace {

const char* const kFiles[] = {"model.safetensors", "config.json", "optimizer.safetensors", "optimizer.json",
                              "trainer_state.json"};

mantissa::train::Session& session() {
  static std::unique_ptr<mantissa::train::Session> s = [] {
    mantissa::train::TrainConfig c;
    std::string text;
    while (text.size() < 400) text += "It is a truth universally acknowledged. ";
    c.data = fuzz::write("corpus.txt", text);
    c.layers = 1, c.d_model = 8, c.heads = 2, c.seq_len = 8, c.batch_size = 2, c.threads = 1, c.eval_batches = 1;
    return mantissa::train::build_session(c);
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mantissa;
  namespace fs = std::filesystem;
  train::Session& s = session();
  const auto parts = fuzz::split(std::string_view(reinterpret_cast<const char*>(data), size));
  const fs::path dir = fuzz::scratch() / "ckpt";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  nlohmann::json manifest = {{"format", "mantissa-checkpoint"}, {"version", 1}, {"files", nlohmann::json::object()}};
  for (size_t i = 0; i < std::size(kFiles) && i < parts.size(); ++i) {
    if (parts[i].empty()) continue;
    fuzz::write("ckpt/" + std::string(kFiles[i]), parts[i]);
    manifest["files"][kFiles[i]] = {{"bytes", parts[i].size()}, {"crc32", io::crc32(parts[i].data(), parts[i].size())}};
  }
  fuzz::write("ckpt/COMPLETE", parts.size() > std::size(kFiles) ? std::string(parts[std::size(kFiles)]) : manifest.dump());
  FUZZ_EXPECT_REFUSAL(s.trainer->resume(dir.string()));
  FUZZ_EXPECT_REFUSAL({
    const std::string cfg = train::read_model_config(dir.string());
    // Sizes are bounded by GPTConfig::validate; the target skips models too
    // big to allocate under the fuzzer's memory limit (parsing is the point).
    const nn::GPTConfig g = nn::GPTConfig::from_json(cfg);
    if (g.layers * 12 * g.d_model * g.d_model + (g.vocab + g.context) * g.d_model > (1 << 22)) return 0;
    auto model = train::model_from_config("gpt", cfg);
    train::load_model_weights(dir.string(), *model);
  });
  return 0;
}
