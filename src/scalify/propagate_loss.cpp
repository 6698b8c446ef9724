// Derived scale-propagation rule for the loss: cross-entropy over logits,
// forward and backward (docs/scale-propagation.md), in fp64 on the values.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mantissa/scalify/propagate.hpp"
#include "scalify/propagate_detail.hpp"

namespace mantissa::scalify {

using namespace detail;  // propagate_detail.hpp

ScaledTensor cross_entropy(const ScaledTensor& logits, const Tensor& targets) {
  need_tensor_scale(logits, "cross_entropy");
  const int64_t N = logits.rows(), V = logits.cols();
  need_shape(targets.numel() == N && targets.dtype() == DType::i32, "cross_entropy", "needs i32 targets [N]");
  const auto v = logits.values();
  double loss = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int32_t t = targets.data<int32_t>()[i];
    if (t < 0) continue;
    need_shape(t < V, "cross_entropy", "got target " + std::to_string(t) + " >= V");
    const float* row = v.data() + i * V;
    const double mx = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(row[j] - mx);
    loss += std::log(sum) + mx - row[t];
  }
  return make({static_cast<float>(loss)}, {1}, 1.0f);
}

ScaledTensor cross_entropy_backward(const ScaledTensor& logits, const Tensor& targets, const ScaledTensor& dloss) {
  need_tensor_scale(logits, "cross_entropy_backward");
  need_tensor_scale(dloss, "cross_entropy_backward");
  const int64_t N = logits.rows(), V = logits.cols();
  need_shape(targets.numel() == N && dloss.numel() == 1, "cross_entropy_backward", "needs targets [N] and dloss [1]");
  const auto v = logits.values();
  const float seed = data_of(dloss)[0];
  std::vector<float> out(v.size(), 0.0f);
  for (int64_t i = 0; i < N; ++i) {
    const int32_t t = targets.data<int32_t>()[i];
    if (t < 0) continue;
    const float* row = v.data() + i * V;
    const double mx = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(row[j] - mx);
    for (int64_t j = 0; j < V; ++j)
      out[static_cast<size_t>(i * V + j)] = static_cast<float>((std::exp(row[j] - mx) / sum - (j == t ? 1.0 : 0.0)) * seed);
  }
  return make(std::move(out), logits.shape(), dloss.scale());
}

}  // namespace mantissa::scalify
