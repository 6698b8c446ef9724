// The float64 attention of reference_ops.hpp on the kernels' layout: qkv
// [B, T, 3C], causal or key-padded, shared by the blockwise attention tests.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "reference_ops.hpp"

namespace mantissa::kernels::test {

struct Shape {
  int64_t B, T, C, NH;
  int64_t hs() const { return C / NH; }
  size_t qkv() const { return static_cast<size_t>(B * T * 3 * C); }
  size_t out() const { return static_cast<size_t>(B * T * C); }
  size_t rows() const { return static_cast<size_t>(B * NH * T); }
};

struct Ref {
  std::vector<double> out, lse, dqkv;
};

// Output, row log-sum-exp and the gradient of sum(out * g) with respect to
// qkv. Row t of sequence b keeps keys 0..t (causal, key_len empty) or
// 0..key_len[b]-1 (right padding).
inline Ref reference(const Shape& s, const std::vector<double>& qkv, const std::vector<float>& g,
                     const std::vector<int32_t>& key_len = {}) {
  ref::Attention a = ref::fused_attention(qkv, s.B, s.T, s.C, s.NH, key_len);
  std::vector<double> dqkv =
      ref::fused_attention_backward(qkv, a.probs, {g.begin(), g.end()}, s.B, s.T, s.C, s.NH, key_len);
  return {std::move(a.out), std::move(a.lse), std::move(dqkv)};
}

}  // namespace mantissa::kernels::test
