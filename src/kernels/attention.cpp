// Causal multi-head self-attention on qkv [B, T, 3C] (q | k | v), NH heads of
// size hs = C / NH. The four products per pass run as oneDNN batched matmuls
// over the B*NH heads; the causal mask and the softmax are fused into one row
// pass in between. Heads are first gathered into contiguous [B*NH, T, hs]
// buffers (a cheap copy next to the T x T products), converted to bf16 on the
// way when the products run in bf16; buffers are reused across calls.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention_fused.hpp"
#include "kernels/attention_heads.hpp"
#include "mantissa/formats/bf16.hpp"
#include "kernels/parallel.hpp"
#include "kernels/row_math.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/kernels/matmul.hpp"
#include "mantissa/cpu/profile.hpp"

namespace mantissa::kernels {
namespace {

using attention_detail::Buffer;
using attention_detail::check_dims;
using attention_detail::Dims;
using attention_detail::gather_heads;
using attention_detail::scatter_heads;

// A [n] fp32 as a matmul operand (bf16 copy when bf16, else the pointer itself).
const void* as_operand(Buffer& tmp, const float* x, int64_t n, bool bf16) {
  if (!bf16) return x;
  tmp.prepare(n, true);
  f32_to_bf16(tmp.b16.data(), x, n);
  return tmp.b16.data();
}

// C [heads, M, N] = alpha op(A) op(B), fp32 result.
void batched(const Dims& d, int64_t M, int64_t N, int64_t K, bool ta, bool tb, float alpha, const void* A,
             const void* B, DType type, float* C) {
  matmul(MatmulArgs::product(M, N, K, ta, tb).with_batch(d.heads()).with_types(type, type).with_alpha(alpha), A, B, C);
}

struct Scratch {
  Buffer q, k, v, dy, tmp;
  std::vector<float> y;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

namespace {

// Columns row r of the [heads * T, T] scores keeps (attention_detail::kept_keys).
int64_t kept_keys(const int32_t* key_len, int64_t r, int64_t T, int64_t NH) {
  return attention_detail::kept_keys(key_len, r / T, r % T, NH);
}

// att [B, NH, T, T] = softmax over each row's kept keys of q k^T / sqrt(hs) (0 beyond); out [B, T, C] = att v
void products_forward(float* out, float* att, const float* qkv, const int32_t* key_len, const Dims& d,
                      bool bf16_products) {
  const int64_t T = d.T, C = d.C;
  const DType type = bf16_products ? DType::bf16 : DType::f32;
  Scratch& s = scratch();
  gather_heads(s.q, qkv, 3 * C, 0, d, bf16_products);
  gather_heads(s.k, qkv, 3 * C, C, d, bf16_products);
  gather_heads(s.v, qkv, 3 * C, 2 * C, d, bf16_products);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  batched(d, T, T, d.hs, false, true, scale, s.q.data(), s.k.data(), type, att);

  // Masked row softmax: the kept columns, the rest become exact zeros.
  const int64_t rows = d.heads() * T;
#pragma omp parallel for schedule(static) if (parallel_rows(rows, T))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = kept_keys(key_len, r, T, d.NH);
    float* a = att + r * T;
    const float mx = span_max(a, n);
    const float sum = span_exp_sum(a, a, n, mx);
    span_scale(a, n, 1.0f / sum);
    std::fill(a + n, a + T, 0.0f);
  }

  s.y.resize(static_cast<size_t>(d.head_elems()));
  const void* p = as_operand(s.tmp, att, rows * T, bf16_products);
  batched(d, T, d.hs, T, false, false, 1.0f, p, s.v.data(), type, s.y.data());
  scatter_heads(out, s.y.data(), C, 0, d, false);
}

// Per head (P = att, dO = dout head, S = scaled scores):
//   dP = dO V^T;  dV = P^T dO;  dS = P * (dP - rowsum(dP * P)) / sqrt(hs) over the kept keys
//   dQ = dS K;    dK = dS^T Q
void products_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                       const int32_t* key_len, const Dims& d, bool bf16_products) {
  const int64_t T = d.T, C = d.C;
  const DType type = bf16_products ? DType::bf16 : DType::f32;
  Scratch& s = scratch();
  gather_heads(s.q, qkv, 3 * C, 0, d, bf16_products);
  gather_heads(s.k, qkv, 3 * C, C, d, bf16_products);
  gather_heads(s.v, qkv, 3 * C, 2 * C, d, bf16_products);
  gather_heads(s.dy, dout, C, 0, d, bf16_products);
  s.y.resize(static_cast<size_t>(d.head_elems()));  // per-head gradient scratch
  const int64_t rows = d.heads() * T;

  batched(d, T, T, d.hs, false, true, 1.0f, s.dy.data(), s.v.data(), type, datt);  // dP
  const void* p = as_operand(s.tmp, att, rows * T, bf16_products);
  batched(d, T, d.hs, T, true, false, 1.0f, p, s.dy.data(), type, s.y.data());  // dV
  scatter_heads(dqkv, s.y.data(), 3 * C, 2 * C, d, true);

  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
#pragma omp parallel for schedule(static) if (parallel_rows(rows, T))
  for (int64_t r = 0; r < rows; ++r) {
    causal_softmax_backward_row(datt + r * T, att + r * T, kept_keys(key_len, r, T, d.NH) - 1, T, scale);
  }

  const void* ds = as_operand(s.tmp, datt, rows * T, bf16_products);
  batched(d, T, d.hs, T, false, false, 1.0f, ds, s.k.data(), type, s.y.data());  // dQ
  scatter_heads(dqkv, s.y.data(), 3 * C, 0, d, true);
  batched(d, T, d.hs, T, true, false, 1.0f, ds, s.q.data(), type, s.y.data());  // dK
  scatter_heads(dqkv, s.y.data(), 3 * C, C, d, true);
}

double attention_flops(int64_t B, int64_t T, int64_t C, int64_t NH, double products) {
  return products * static_cast<double>(B * NH) * static_cast<double>(T * T) * static_cast<double>(C / (NH > 0 ? NH : 1));
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       bool bf16_products) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::attention, attention_flops(B, T, C, NH, 4.0));
  const Dims d = check_dims(B, T, C, NH);
  if (bf16_products ? attention_detail::fused_takes_bf16() : attention_detail::fused_available())
    return attention_detail::fused_forward(out, att, qkv, d, bf16_products);
  products_forward(out, att, qkv, nullptr, d, bf16_products);
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                        int64_t B, int64_t T, int64_t C, int64_t NH, bool bf16_products) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::attention, attention_flops(B, T, C, NH, 8.0));
  const Dims d = check_dims(B, T, C, NH);
  if (bf16_products ? attention_detail::fused_takes_bf16() : attention_detail::fused_available())
    return attention_detail::fused_backward(dqkv, datt, dout, qkv, att, d, bf16_products);
  products_backward(dqkv, datt, dout, qkv, att, nullptr, d, bf16_products);
}

void attention_forward_keys(float* out, float* att, const float* qkv, const int32_t* key_len, int64_t B, int64_t T,
                            int64_t C, int64_t NH, bool bf16_products) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::attention, attention_flops(B, T, C, NH, 4.0));
  const Dims d = check_dims(B, T, C, NH);
  attention_detail::check_key_len(key_len, B, T);
  products_forward(out, att, qkv, key_len, d, bf16_products);
}

void attention_backward_keys(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                             const int32_t* key_len, int64_t B, int64_t T, int64_t C, int64_t NH, bool bf16_products) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::attention, attention_flops(B, T, C, NH, 8.0));
  products_backward(dqkv, datt, dout, qkv, att, key_len, check_dims(B, T, C, NH), bf16_products);
}

// ---- bf16-amp variant: probabilities made once, in bf16 ----------------------------------
// Under bf16 products with bf16 saved activations the probabilities were
// rounded to bf16 twice in the forward pass (as the P V operand and when
// saved) and widened again in the backward pass. Here the softmax writes the
// bf16 codes directly into att16, which is both the operand and what backward
// keeps; the score gradients are written as bf16 operand codes the same way.
// Bits equal attention_forward/backward(bf16_products = true) given att16 =
// bf16(att), since both round to nearest even.
namespace {
std::vector<float>& score_scratch(int64_t n) {
  thread_local std::vector<float> s;
  s.resize(static_cast<size_t>(n));
  return s;
}
}  // namespace

void attention_forward_bf16(float* out, uint16_t* att16, const float* qkv, int64_t B, int64_t T, int64_t C,
                            int64_t NH) {
  const Dims d = check_dims(B, T, C, NH);
  cpu::profile::Scope profile_scope(cpu::profile::Category::attention,
                                        4.0 * static_cast<double>(d.heads() * T * T * d.hs));
  if (attention_detail::fused_takes_bf16()) return attention_detail::fused_forward_bf16(out, att16, qkv, d);
  Scratch& s = scratch();
  gather_heads(s.q, qkv, 3 * C, 0, d, true);
  gather_heads(s.k, qkv, 3 * C, C, d, true);
  gather_heads(s.v, qkv, 3 * C, 2 * C, d, true);
  const int64_t rows = d.heads() * T;
  float* scores = score_scratch(rows * T).data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  batched(d, T, T, d.hs, false, true, scale, s.q.data(), s.k.data(), DType::bf16, scores);
#pragma omp parallel for schedule(static) if (parallel_rows(rows, T))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % T;
    float* a = scores + r * T;
    const float mx = span_max(a, t + 1);
    const float sum = span_exp_sum(a, a, t + 1, mx);
    const float inv = 1.0f / sum;
    uint16_t* p = att16 + r * T;
#pragma omp simd
    for (int64_t j = 0; j <= t; ++j) p[j] = formats::round_bf16(a[j] * inv);
    std::fill(p + t + 1, p + T, uint16_t{0});
  }
  s.y.resize(static_cast<size_t>(d.head_elems()));
  batched(d, T, d.hs, T, false, false, 1.0f, att16, s.v.data(), DType::bf16, s.y.data());
  scatter_heads(out, s.y.data(), C, 0, d, false);
}

void attention_backward_bf16(float* dqkv, float* datt, const float* dout, const float* qkv, const uint16_t* att16,
                             int64_t B, int64_t T, int64_t C, int64_t NH) {
  const Dims d = check_dims(B, T, C, NH);
  cpu::profile::Scope profile_scope(cpu::profile::Category::attention,
                                        8.0 * static_cast<double>(d.heads() * T * T * d.hs));
  if (attention_detail::fused_takes_bf16())
    return attention_detail::fused_backward_bf16(dqkv, datt, dout, qkv, att16, d);
  Scratch& s = scratch();
  gather_heads(s.q, qkv, 3 * C, 0, d, true);
  gather_heads(s.k, qkv, 3 * C, C, d, true);
  gather_heads(s.v, qkv, 3 * C, 2 * C, d, true);
  gather_heads(s.dy, dout, C, 0, d, true);
  s.y.resize(static_cast<size_t>(d.head_elems()));
  const int64_t rows = d.heads() * T;

  batched(d, T, T, d.hs, false, true, 1.0f, s.dy.data(), s.v.data(), DType::bf16, datt);  // dP
  batched(d, T, d.hs, T, true, false, 1.0f, att16, s.dy.data(), DType::bf16, s.y.data());  // dV
  scatter_heads(dqkv, s.y.data(), 3 * C, 2 * C, d, true);

  // dS in bf16 operand codes, straight from dP and the bf16 probabilities.
  s.tmp.prepare(rows * T, true);
  uint16_t* ds = s.tmp.b16.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
#pragma omp parallel for schedule(static) if (parallel_rows(rows, T))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % T;
    const uint16_t* pr = att16 + r * T;
    const float* g = datt + r * T;
    uint16_t* o = ds + r * T;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j <= t; ++j) dot += formats::widen_bf16(pr[j]) * g[j];
#pragma omp simd
    for (int64_t j = 0; j <= t; ++j) o[j] = formats::round_bf16(formats::widen_bf16(pr[j]) * (g[j] - dot) * scale);
    std::fill(o + t + 1, o + T, uint16_t{0});
  }
  batched(d, T, d.hs, T, false, false, 1.0f, ds, s.k.data(), DType::bf16, s.y.data());  // dQ
  scatter_heads(dqkv, s.y.data(), 3 * C, 0, d, true);
  batched(d, T, d.hs, T, true, false, 1.0f, ds, s.q.data(), DType::bf16, s.y.data());  // dK
  scatter_heads(dqkv, s.y.data(), 3 * C, C, d, true);
}

}  // namespace mantissa::kernels
