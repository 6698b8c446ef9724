// Shared by tests/nn/test_hf_{bert,llama}.cpp: a model directory mantissa
// saved (tests/golden/data/<name>_hf: config.json, model.safetensors) that
// transformers loaded strictly, and the logits transformers computed from it
// (hf_logits.safetensors: ids, logits; tests/golden/make_golden_*_hf.py).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "golden/golden.hpp"
#include "mantissa/io/safetensors.hpp"
#include "mantissa/train/checkpoint.hpp"

namespace mantissa::hf_test {

inline std::string hf_dir(const std::string& name) {
  return std::string(MANTISSA_SOURCE_DIR) + "/tests/golden/data/" + name + "_hf";
}

// The model of `dir`, read as mantissa reads a saved model.
template <class M, class Config>
std::unique_ptr<M> load(const std::string& dir) {
  auto model = std::make_unique<M>(Config::from_json(train::read_model_config(dir)));
  train::load_model_weights(dir, *model);
  return model;
}

// The model's logits of transformers' ids against transformers' logits (fp32 both).
inline void expect_transformers_logits(nn::Model& model, const std::string& dir) {
  const io::SafetensorsFile g = io::load_safetensors(dir + "/hf_logits.safetensors");
  const double rel = golden::rel_max_diff(model.logits(g.tensors.at("ids")), g.tensors.at("logits"));
  std::printf("logits rel max diff vs transformers (fp32, %s): %.2e\n", g.metadata.at("generator").c_str(), rel);
  EXPECT_LE(rel, 1e-5);
}

// "name[d0, d1]" of every tensor in a safetensors file.
inline std::set<std::string> names_and_shapes(const std::string& path) {
  std::set<std::string> out;
  for (const auto& [k, v] : io::load_safetensors(path).tensors) out.insert(k + shape_str(v.shape()));
  return out;
}

// Saves the model into `out` and expects exactly the names and shapes of dir's
// model.safetensors (what transformers loaded); returns them.
inline std::set<std::string> expect_saved_as_loaded(nn::Model& model, const std::string& dir, const std::string& out) {
  train::save_model(out, model);
  const std::set<std::string> saved = names_and_shapes(out + "/model.safetensors");
  EXPECT_EQ(names_and_shapes(dir + "/model.safetensors"), saved);
  return saved;
}

}  // namespace mantissa::hf_test
