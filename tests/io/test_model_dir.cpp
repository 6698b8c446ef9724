// A Hugging Face model directory's weights: one model.safetensors, or shards
// listed by model.safetensors.index.json. The transformers-written GPT-2 golden
// (tests/golden/data/hf_import_gpt2) split into shards must read back tensor
// for tensor, bit for bit, and load into a model whose logits equal the
// single-file model's; every inconsistent index is refused naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/io/files.hpp"
#include "mantissa/io/model_dir.hpp"
#include "mantissa/io/safetensors.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/train/checkpoint.hpp"
#include "temp_dir.hpp"

namespace mantissa {
namespace {

const std::string kGolden = std::string(MANTISSA_SOURCE_DIR) + "/tests/golden/data/hf_import_gpt2";

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.numel()) * dtype_size(a.dtype())) == 0;
}

// Writes the golden's tensors into `shards` files of dir (round robin) and
// their index, with config.json beside them; returns the index.
nlohmann::json write_shards(const TempDir& dir, int shards) {
  const io::SafetensorsFile whole = io::load_safetensors(kGolden + "/model.safetensors");
  std::vector<std::vector<std::pair<std::string, Tensor>>> parts(shards);
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  int i = 0;
  for (const auto& [name, t] : whole.tensors) {
    const std::string file = "model-0000" + std::to_string(i % shards + 1) + "-of-0000" + std::to_string(shards) +
                             ".safetensors";
    parts[i % shards].emplace_back(name, t);
    index["weight_map"][name] = file;
    ++i;
  }
  for (int s = 0; s < shards; ++s)
    io::save_safetensors(dir / ("model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) +
                                ".safetensors"),
                         parts[s], whole.metadata);
  io::write_file_atomic(dir / "model.safetensors.index.json", index.dump());
  io::write_file_atomic(dir / "config.json", io::read_file(kGolden + "/config.json"));
  return index;
}

std::string error_of(const std::string& dir) {
  try {
    io::read_model_dir(dir);
  } catch (const io::FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(ModelDir, ShardsReadBackAsTheSingleFile) {
  TempDir dir("model_dir");
  write_shards(dir, 3);
  const io::SafetensorsFile whole = io::load_safetensors(kGolden + "/model.safetensors");
  const io::SafetensorsFile sharded = io::read_model_dir(dir.path.string());
  ASSERT_EQ(sharded.tensors.size(), whole.tensors.size());
  for (const auto& [name, t] : whole.tensors) {
    ASSERT_TRUE(sharded.tensors.count(name)) << name;
    EXPECT_TRUE(same_bytes(sharded.tensors.at(name), t)) << name;
  }
  EXPECT_EQ(io::model_dir_weights_path(dir.path.string()), dir / "model.safetensors.index.json");
  EXPECT_EQ(io::model_dir_weights_path(kGolden), kGolden + "/model.safetensors");
}

TEST(ModelDir, AShardedModelComputesTheSingleFileModelsLogits) {
  TempDir dir("model_dir");
  write_shards(dir, 2);
  auto build = [](const std::string& d) {
    const std::string cfg = train::read_model_config(d);
    std::unique_ptr<nn::Model> m = nn::find_model_kind(nn::detect_model_kind(cfg))->load(cfg);
    train::load_model_weights(d, *m);
    return m;
  };
  auto a = build(kGolden), b = build(dir.path.string());
  Tensor ids = io::load_safetensors(kGolden + "/hf_logits.safetensors").tensors.at("ids");
  EXPECT_TRUE(same_bytes(a->logits(ids), b->logits(ids)));
}

TEST(ModelDir, InconsistentIndexesAreRefusedNamingTheFile) {
  auto refused = [](const std::function<void(nlohmann::json&, const TempDir&)>& spoil,
                    const std::vector<std::string>& needles) {
    TempDir dir("model_dir");
    nlohmann::json index = write_shards(dir, 2);
    spoil(index, dir);
    io::write_file_atomic(dir / "model.safetensors.index.json", index.dump());
    const std::string msg = error_of(dir.path.string());
    EXPECT_FALSE(msg.empty()) << "accepted; expected " << needles[0];
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  };
  const std::string first = "transformer.h.0.attn.c_attn.weight";
  // a shard outside the directory
  refused([&](nlohmann::json& j, const TempDir&) { j["weight_map"][first] = "../model-00001-of-00002.safetensors"; },
          {"model.safetensors.index.json", first, "not the name of a .safetensors file"});
  refused([&](nlohmann::json& j, const TempDir&) { j["weight_map"][first] = "/etc/passwd"; }, {"not the name"});
  refused([&](nlohmann::json& j, const TempDir&) { j["weight_map"][first] = 7; }, {"is not a file name"});
  // a tensor indexed in one shard but stored in the other
  refused([&](nlohmann::json& j, const TempDir&) {
    const std::string at = j["weight_map"][first];
    j["weight_map"][first] = at.find("00001") != std::string::npos ? "model-00002-of-00002.safetensors"
                                                                    : "model-00001-of-00002.safetensors";
  }, {first, "is indexed in"});
  // a tensor the index does not list, and one it lists that no shard holds
  refused([&](nlohmann::json& j, const TempDir&) { j["weight_map"].erase(first); }, {first, "is not in"});
  refused([&](nlohmann::json& j, const TempDir&) { j["weight_map"]["lm_head.extra"] = "model-00001-of-00002.safetensors"; },
          {"lm_head.extra", "missing"});
  refused([&](nlohmann::json& j, const TempDir&) { j = nlohmann::json::array(); }, {"weight_map"});
  refused([&](nlohmann::json& j, const TempDir&) { j["weight_map"] = nlohmann::json::object(); }, {"names no tensor"});
}

TEST(ModelDir, PickleCheckpointsAreRefusedWithTheWayOut) {
  TempDir dir("model_dir");
  dir.write("pytorch_model.bin", "PK\x03\x04 not read");
  const std::string msg = error_of(dir.path.string());
  EXPECT_NE(msg.find("pytorch_model.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("safe_serialization=True"), std::string::npos) << msg;
  TempDir empty("model_dir");
  EXPECT_NE(error_of(empty.path.string()).find("model.safetensors: no such file"), std::string::npos);
}

}  // namespace
}  // namespace mantissa
