// The causal LMs' chunked head and loss (nn::set_logit_chunk_elements): with
// the logits computed a few rows at a time, the loss and every gradient
// equal the whole-logits pass within the fp32 reordering of the head's sums, for GPT
// (tied head), unit-scaled GPT (own lm_head) and Llama, chunks that do not
// divide the rows, targets ignored in some rows; and the activation peak
// drops by at least the whole logits.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mantissa/nn/gpt.hpp"
#include "mantissa/nn/llama.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/tensor/memory.hpp"

namespace mantissa {
namespace {

constexpr int64_t kB = 2, kT = 32, kV = 4096, kDModel = 32;

nn::Batch batch() {
  std::mt19937_64 rng(3);
  Tensor ids = Tensor::empty({kB, kT}, DType::i32), targets = Tensor::empty({kB, kT}, DType::i32);
  for (int64_t i = 0; i < kB * kT; ++i) {
    ids.data<int32_t>()[i] = static_cast<int32_t>(rng() % kV);
    targets.data<int32_t>()[i] = i % 11 == 5 ? -1 : static_cast<int32_t>(rng() % kV);
  }
  return {ids, targets};
}

struct Pass {
  double loss = 0;
  std::vector<std::vector<float>> grads;
  size_t activation_peak = 0;
};

Pass run(nn::Model& model, int64_t chunk_elements) {
  const int64_t before = nn::logit_chunk_elements();
  nn::set_logit_chunk_elements(chunk_elements);
  for (autograd::Parameter* p : model.parameters()) p->grad = Tensor();
  reset_peak_memory();
  const size_t start = memory_stats().current[static_cast<size_t>(MemoryKind::activation)];
  const nn::LossSum l = model.forward_backward(batch(), 0.5f);
  Pass out;
  out.activation_peak = memory_stats().peak_of(MemoryKind::activation) - start;
  const nn::LossSum e = model.evaluate(batch());
  nn::set_logit_chunk_elements(before);
  EXPECT_EQ(e.count, l.count);
  EXPECT_NEAR(e.sum, l.sum, 1e-9 * std::abs(l.sum));
  out.loss = l.sum / static_cast<double>(l.count);
  for (autograd::Parameter* p : model.parameters()) out.grads.push_back(p->grad.to_vector());
  return out;
}

void expect_chunks_agree(nn::Model& model) {
  const Pass whole = run(model, kB * kT * kV);
  const Pass chunked = run(model, 7 * kV);  // 7 rows a chunk: 64 rows are 9 chunks, the last of 1
  // A chunk's head product may sum its d_model terms in another order than the
  // whole one (oneDNN's blocking follows the rows: gemm:jit on AVX2 does), so
  // each logit may differ by fp32 rounding, at most d_model units of 2^-24.
  EXPECT_NEAR(chunked.loss, whole.loss, kDModel * 0x1p-24 * whole.loss);
  ASSERT_EQ(chunked.grads.size(), whole.grads.size());
  const std::vector<autograd::Parameter*> params = model.parameters();
  for (size_t i = 0; i < whole.grads.size(); ++i) {
    double scale = 0, diff = 0;
    for (size_t j = 0; j < whole.grads[i].size(); ++j) {
      scale = std::max(scale, static_cast<double>(std::abs(whole.grads[i][j])));
      diff = std::max(diff, static_cast<double>(std::abs(whole.grads[i][j] - chunked.grads[i][j])));
    }
    EXPECT_LE(diff, 1e-5 * scale + 1e-30) << params[i]->name;
    EXPECT_GT(scale, 0.0) << params[i]->name << ": no gradient";
  }
  const size_t logits = static_cast<size_t>(kB * kT * kV) * sizeof(float);
  std::printf("activation peak: whole logits %zu bytes, chunked %zu bytes (logits %zu)\n", whole.activation_peak,
              chunked.activation_peak, logits);
  EXPECT_LE(chunked.activation_peak + logits, whole.activation_peak);
}

nn::GPTConfig gpt_config(bool unit) {
  nn::GPTConfig c;
  c.vocab = kV;
  c.context = kT;
  c.layers = 2;
  c.d_model = kDModel;
  c.heads = 2;
  c.seed = 5;
  c.unit.enabled = unit;
  return c;
}

TEST(LogitChunks, GptGradientsAndLossMatchTheWholeLogits) {
  nn::GPT model(gpt_config(false));
  expect_chunks_agree(model);
}

TEST(LogitChunks, UnitScaledGptGradientsAndLossMatchTheWholeLogits) {
  nn::GPT model(gpt_config(true));
  expect_chunks_agree(model);
}

TEST(LogitChunks, LlamaGradientsAndLossMatchTheWholeLogits) {
  nn::LlamaConfig c;
  c.vocab = kV;
  c.context = kT;
  c.layers = 2;
  c.d_model = kDModel;
  c.heads = 4;
  c.kv_heads = 2;
  c.seed = 6;
  nn::Llama model(c);
  expect_chunks_agree(model);
}

TEST(LogitChunks, ALimitBelowOneElementIsRefused) {
  EXPECT_THROW(nn::set_logit_chunk_elements(0), std::invalid_argument);
}

}  // namespace
}  // namespace mantissa
