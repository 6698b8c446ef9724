// The whole u-muP GPT against Graphcore's unit-scaling 0.3.5: make_golden.py
// composes the package's functional ops into the model mantissa builds for
// parametrisation=umup (embedding add, per-block residual split/add with the
// package's depth rule for the taus, non-parametric LayerNorms, unit linears,
// u-muP attention, tanh GELU, readout, unit cross-entropy) in float64 and
// stores the loss and every parameter gradient at one batch
// (tests/golden/unit_scaling/models/umup_gpt.json). The float32 model loaded
// with the same weights must reproduce them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "mantissa/io/files.hpp"
#include "mantissa/nn/gpt.hpp"

using namespace mantissa;
using nlohmann::json;

TEST(UmupGolden, WholeModelMatchesUnitScalingPackage) {
  const auto path = std::filesystem::path(MANTISSA_SOURCE_DIR) / "tests/golden/unit_scaling/models/umup_gpt.json";
  const json g = json::parse(io::read_file(path.string()));
  const json& cfg = g["config"];
  nn::GPTConfig c;
  c.vocab = cfg["vocab"];
  c.context = cfg["context"];
  c.d_model = cfg["d_model"];
  c.heads = cfg["heads"];
  c.layers = cfg["layers"];
  c.unit.enabled = true;
  c.unit.umup = true;
  c.unit.residual_mult = cfg["residual_mult"];
  c.unit.residual_attn_ratio = cfg["residual_attn_ratio"];
  c.unit.attn_mult = cfg["attn_mult"];
  nn::GPT m(c);
  ASSERT_EQ(m.parameters().size(), g["params"].size());  // no norm parameters on either side
  for (autograd::Parameter* p : m.parameters()) {
    SCOPED_TRACE(p->name);
    ASSERT_TRUE(g["params"].contains(p->name));
    const auto v = g["params"][p->name]["data"].get<std::vector<double>>();
    ASSERT_EQ(static_cast<int64_t>(v.size()), p->value.numel());
    for (size_t i = 0; i < v.size(); ++i) p->value.f32()[i] = static_cast<float>(v[i]);
    ++p->version;
  }
  const int64_t B = cfg["batch"], T = c.context;
  nn::Batch batch{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
  const auto ids = g["ids"].get<std::vector<int32_t>>(), targets = g["targets"].get<std::vector<int32_t>>();
  std::copy(ids.begin(), ids.end(), batch.inputs.data<int32_t>());
  std::copy(targets.begin(), targets.end(), batch.targets.data<int32_t>());

  m.zero_grad();
  const nn::LossSum loss = m.forward_backward(batch, 1.0f / static_cast<float>(B * T));  // one micro-batch
  EXPECT_NEAR(loss.sum, g["loss_sum"].get<double>(), 1e-5 * g["loss_sum"].get<double>());
  for (autograd::Parameter* p : m.parameters()) {
    SCOPED_TRACE(p->name);
    const auto want = g["grads"][p->name]["data"].get<std::vector<double>>();
    const auto got = p->grad.to_vector();
    double scale = 0, err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::fabs(want[i]));
      err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    }
    ASSERT_GT(scale, 0.0);
    EXPECT_LE(err, 1e-4 * scale) << "max error " << err << " vs max |golden| " << scale;
  }
}
