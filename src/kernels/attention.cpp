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

#include "kernels/bf16_convert.hpp"
#include "kernels/parallel.hpp"
#include "kernels/row_math.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/kernels/matmul.hpp"

namespace mantissa::kernels {
namespace {

struct Dims {
  int64_t B, T, C, NH, hs;
  int64_t heads() const { return B * NH; }
  int64_t head_elems() const { return B * NH * T * hs; }
};

Dims check_dims(int64_t B, int64_t T, int64_t C, int64_t NH) {
  if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH != 0) {
    throw std::invalid_argument("attention: bad shape B=" + std::to_string(B) + " T=" + std::to_string(T) +
                                " C=" + std::to_string(C) + " NH=" + std::to_string(NH) +
                                " (C must be a multiple of NH)");
  }
  return {B, T, C, NH, C / NH};
}

// A matmul operand buffer: fp32 or bf16 codes, reused across calls.
struct Buffer {
  std::vector<float> f32;
  std::vector<uint16_t> b16;
  bool bf16 = false;
  void prepare(int64_t n, bool use_bf16) {
    bf16 = use_bf16;
    if (bf16) {
      b16.resize(static_cast<size_t>(n));
    } else {
      f32.resize(static_cast<size_t>(n));
    }
  }
  const void* data() const { return bf16 ? static_cast<const void*>(b16.data()) : f32.data(); }
  DType type() const { return bf16 ? DType::bf16 : DType::f32; }
  void store(int64_t at, const float* src, int64_t n) {
    if (bf16) {
      for (int64_t j = 0; j < n; ++j) b16[static_cast<size_t>(at + j)] = f32_to_bf16_one(src[j]);
    } else {
      std::copy_n(src, n, f32.data() + at);
    }
  }
};

// src [B, T, stride] with head h at column offset + h*hs  ->  dst [B, NH, T, hs]
void gather_heads(Buffer& dst, const float* src, int64_t stride, int64_t offset, const Dims& d, bool bf16) {
  dst.prepare(d.head_elems(), bf16);
#pragma omp parallel for schedule(static) if (parallel_rows(d.B * d.T, d.C))
  for (int64_t bt = 0; bt < d.B * d.T; ++bt) {
    const int64_t b = bt / d.T, t = bt % d.T;
    const float* row = src + bt * stride + offset;
    for (int64_t h = 0; h < d.NH; ++h) dst.store(((b * d.NH + h) * d.T + t) * d.hs, row + h * d.hs, d.hs);
  }
}

// A [n] fp32 as a matmul operand (bf16 copy when bf16, else the pointer itself).
const void* as_operand(Buffer& tmp, const float* x, int64_t n, bool bf16) {
  if (!bf16) return x;
  tmp.prepare(n, true);
  f32_to_bf16(tmp.b16.data(), x, n);
  return tmp.b16.data();
}

// dst [B, T, stride] (+)= src [B, NH, T, hs] at column offset + h*hs
void scatter_heads(float* dst, const float* src, int64_t stride, int64_t offset, const Dims& d,
                   bool accumulate) {
#pragma omp parallel for schedule(static) if (parallel_rows(d.B * d.T, d.C))
  for (int64_t bt = 0; bt < d.B * d.T; ++bt) {
    const int64_t b = bt / d.T, t = bt % d.T;
    float* row = dst + bt * stride + offset;
    for (int64_t h = 0; h < d.NH; ++h) {
      const float* s = src + ((b * d.NH + h) * d.T + t) * d.hs;
      float* o = row + h * d.hs;
      if (accumulate) {
#pragma omp simd
        for (int64_t j = 0; j < d.hs; ++j) o[j] += s[j];
      } else {
        std::copy_n(s, d.hs, o);
      }
    }
  }
}

// C [heads, M, N] = alpha op(A) op(B), fp32 result.
void batched(const Dims& d, int64_t M, int64_t N, int64_t K, bool ta, bool tb, float alpha, const void* A,
             const void* B, DType type, float* C) {
  MatmulArgs a;
  a.batch = d.heads();
  a.M = M;
  a.N = N;
  a.K = K;
  a.trans_a = ta;
  a.trans_b = tb;
  a.alpha = alpha;
  a.a_type = a.b_type = type;
  matmul(a, A, B, C);
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

// att [B, NH, T, T] = causal_softmax(q k^T / sqrt(hs)); out [B, T, C] = att v
void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       bool bf16_products) {
  const Dims d = check_dims(B, T, C, NH);
  const DType type = bf16_products ? DType::bf16 : DType::f32;
  Scratch& s = scratch();
  gather_heads(s.q, qkv, 3 * C, 0, d, bf16_products);
  gather_heads(s.k, qkv, 3 * C, C, d, bf16_products);
  gather_heads(s.v, qkv, 3 * C, 2 * C, d, bf16_products);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  batched(d, T, T, d.hs, false, true, scale, s.q.data(), s.k.data(), type, att);

  // Masked row softmax: row t keeps columns 0..t, the rest become exact zeros.
  const int64_t rows = d.heads() * T;
#pragma omp parallel for schedule(static) if (parallel_rows(rows, T))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % T;
    float* a = att + r * T;
    const float mx = span_max(a, t + 1);
    const float sum = span_exp_sum(a, a, t + 1, mx);
    span_scale(a, t + 1, 1.0f / sum);
    std::fill(a + t + 1, a + T, 0.0f);
  }

  s.y.resize(static_cast<size_t>(d.head_elems()));
  const void* p = as_operand(s.tmp, att, rows * T, bf16_products);
  batched(d, T, d.hs, T, false, false, 1.0f, p, s.v.data(), type, s.y.data());
  scatter_heads(out, s.y.data(), C, 0, d, false);
}

// Per head (P = att, dO = dout head, S = scaled scores):
//   dP = dO V^T;  dV = P^T dO;  dS = P * (dP - rowsum(dP * P)) / sqrt(hs)
//   dQ = dS K;    dK = dS^T Q
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                        int64_t B, int64_t T, int64_t C, int64_t NH, bool bf16_products) {
  const Dims d = check_dims(B, T, C, NH);
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
    const int64_t t = r % T;
    const float* pr = att + r * T;
    float* g = datt + r * T;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j <= t; ++j) dot += pr[j] * g[j];
#pragma omp simd
    for (int64_t j = 0; j <= t; ++j) g[j] = pr[j] * (g[j] - dot) * scale;
    std::fill(g + t + 1, g + T, 0.0f);
  }

  const void* ds = as_operand(s.tmp, datt, rows * T, bf16_products);
  batched(d, T, d.hs, T, false, false, 1.0f, ds, s.k.data(), type, s.y.data());  // dQ
  scatter_heads(dqkv, s.y.data(), 3 * C, 0, d, true);
  batched(d, T, d.hs, T, true, false, 1.0f, ds, s.q.data(), type, s.y.data());  // dK
  scatter_heads(dqkv, s.y.data(), 3 * C, C, d, true);
}

}  // namespace mantissa::kernels
