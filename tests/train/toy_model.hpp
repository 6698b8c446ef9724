// A tiny bigram language model written in plain loops (double precision
// softmax), implementing nn::Model, so trainer tests do not depend on the
// GPT and can compute their references independently.
#pragma once

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "mantissa/data/source.hpp"
#include "mantissa/nn/module.hpp"

namespace toy {

using namespace mantissa;

class Bigram final : public nn::Model {
 public:
  explicit Bigram(int64_t vocab, uint64_t seed = 1) : vocab_(vocab) {
    w_.name = "emb.weight";
    w_.value = Tensor::empty({vocab, vocab}, DType::f32, MemoryKind::parameter);
    w_.grad = Tensor::zeros({vocab, vocab}, DType::f32, MemoryKind::gradient);
    w_.fan_in = vocab;
    b_.name = "head.bias";
    b_.decay = false;
    b_.value = Tensor::zeros({vocab}, DType::f32, MemoryKind::parameter);
    b_.grad = Tensor::zeros({vocab}, DType::f32, MemoryKind::gradient);
    std::mt19937_64 rng(seed);
    for (int64_t i = 0; i < w_.value.numel(); ++i)
      w_.value.f32()[i] = static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53 - 0.5) * 0.2f;
  }
  std::vector<autograd::Parameter*> parameters() override { return {&w_, &b_}; }
  nn::LossSum forward_backward(const nn::Batch& batch, float grad_scale) override { return run(batch, grad_scale, true); }
  nn::LossSum evaluate(const nn::Batch& batch) override { return run(batch, 0, false); }
  std::string config_json() const override { return nlohmann::json{{"vocab_size", vocab_}}.dump(); }
  std::string kind() const override { return "toy-bigram"; }

  bool poison_next_backward = false;  // plant an inf in the gradient (overflow)
  int backward_calls = 0;

 private:
  nn::LossSum run(const nn::Batch& batch, float grad_scale, bool backward) {
    nn::LossSum r;
    const int32_t* x = batch.inputs.data<int32_t>();
    const int32_t* y = batch.targets.data<int32_t>();
    std::vector<double> p(static_cast<size_t>(vocab_));
    for (int64_t i = 0; i < batch.targets.numel(); ++i) {
      if (y[i] < 0) continue;
      const float* row = w_.value.f32() + x[i] * vocab_;
      double mx = -1e300, z = 0;
      for (int64_t v = 0; v < vocab_; ++v) mx = std::max(mx, static_cast<double>(row[v] + b_.value.f32()[v]));
      for (int64_t v = 0; v < vocab_; ++v) z += p[v] = std::exp(row[v] + b_.value.f32()[v] - mx);
      r.sum += -std::log(p[y[i]] / z);
      ++r.count;
      if (!backward) continue;
      float* gw = w_.grad.f32() + x[i] * vocab_;
      for (int64_t v = 0; v < vocab_; ++v) {
        const float g = grad_scale * static_cast<float>(p[v] / z - (v == y[i]));
        gw[v] += g;
        b_.grad.f32()[v] += g;
      }
    }
    if (backward) {
      ++backward_calls;
      if (poison_next_backward) {
        w_.grad.f32()[0] = std::numeric_limits<float>::infinity();
        poison_next_backward = false;
      }
    }
    return r;
  }

  int64_t vocab_;
  autograd::Parameter w_, b_;
};

// Batches served in a fixed cycle; the cursor is the resumable state.
class ListSource final : public data::TrainSource {
 public:
  explicit ListSource(std::vector<nn::Batch> batches) : batches_(std::move(batches)) {}
  nn::Batch next() override { return batches_[cursor_++ % batches_.size()]; }
  std::string state_json() const override { return nlohmann::json{{"cursor", cursor_}}.dump(); }
  void load_state(const std::string& j) override { cursor_ = nlohmann::json::parse(j).at("cursor").get<size_t>(); }

 private:
  std::vector<nn::Batch> batches_;
  size_t cursor_ = 0;
};

// i32 tensor [rows, cols] from values.
inline Tensor ints(const std::vector<int32_t>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::i32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

}  // namespace toy
