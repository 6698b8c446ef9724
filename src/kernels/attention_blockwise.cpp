// Blockwise (flash-style) attention, causal or key-padded (BERT). Queries are
// taken kBlockRows rows at a time, for all B*NH heads at once: a block's
// scores [heads, rows, kend] come from one batched product whose operands are
// row ranges of the gathered q and k (matmul batch strides), so the T x T
// matrix exists only a block at a time. kend is the last key any row of the
// block keeps, plus one: causal, the block's last row + 1 (later keys are never
// needed); key-padded, the longest sequence's length (every row of sequence b
// keeps keys 0..key_len[b]-1, padded query rows included). Within a block each
// row's whole key range is present, so its softmax is exact in one pass (no
// online rescaling needed); forward keeps only lse = max + log(sum exp) per
// row, and backward rebuilds P = exp(S - lse). Keys a row does not keep get
// exact zeros in P and dS, hence no weight and no gradient.
//
// Per block (S = scaled scores, P probabilities, dO = dout head rows):
//   forward:  S = q_blk k^T / sqrt(hs);  P = softmax(S);  O_blk = P v
//   backward: dP = dO_blk v^T;  dV += P^T dO_blk;  dS = P (dP - rowsum(P dP)) / sqrt(hs)
//             dQ_blk = dS k;  dK += dS^T q_blk
// Large blocks keep the products efficient (oneDNN batched over heads); the
// per-block scratch is heads x kBlockRows x T floats.
#include <algorithm>
#include <cmath>
#include <vector>

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
using attention_detail::kept_keys;
using attention_detail::scatter_heads;

constexpr int64_t kBlockRows = 64;
// Where the blockwise path wins (the cross-overs bench/bench_attention.cpp
// finds; figures in docs/ARCHITECTURE.md): with fp32 products from T = 512,
// since it skips the masked half of the products and the T x T traffic; with
// bf16 products (AMX) from T = 1024, or when the whole scores would pass 256 MiB.
constexpr int64_t kBlockwiseMinT_f32 = 512;
constexpr int64_t kBlockwiseMinT_bf16 = 1024;
constexpr double kBlockwiseScoresBytes = 256.0 * (1 << 20);
// Key-padded (bidirectional) attention has no masked half to skip, and every
// block's key-side products span all kept keys: the blockwise path is slower
// at every T bench_attention measures and is taken for memory, from T = 2048
// (where it keeps a fifth of the whole path's peak) or past 256 MiB of scores.
constexpr int64_t kBlockwiseKeysMinT_f32 = 2048;
constexpr int64_t kBlockwiseKeysMinT_bf16 = 2048;

// C [heads, M, N] (+)= alpha op(A) op(B); A, B, C start at the given element
// offsets with the given batch strides (0: dense).
struct Strided {
  const void* p;
  int64_t batch_stride;
};

// heads matrices of n contiguous elements, `stride` apart, packed densely into out.
template <class T>
const T* packed(std::vector<T>& out, const T* in, int64_t heads, int64_t n, int64_t stride) {
  out.resize(static_cast<size_t>(heads * n));
  for (int64_t h = 0; h < heads; ++h) std::copy_n(in + h * stride, n, out.data() + h * n);
  return out.data();
}

// oneDNN 2.6 runs fp32 batched products with batch strides as gemm:jit, an
// order of magnitude below its brgemm on dense batches (bench_attention:
// 12.8x the whole-scores path at T = 1024 on AMX and AVX-512 hosts), so fp32
// operands and results are packed densely per head around the product. Each
// head's matrix is a contiguous row range, so packing is a copy per head
// (about 1/nb of the product's memory traffic); bf16 products keep the
// strides, which oneDNN's AMX kernels take.
struct DenseScratch {
  std::vector<float> a, b, c;
};
DenseScratch& dense_scratch() {
  thread_local DenseScratch s;
  return s;
}

void product(const Dims& d, int64_t M, int64_t N, int64_t K, bool ta, bool tb, float alpha, Strided A, Strided B,
             DType type, float* C, int64_t c_stride, bool accumulate);

void product_dense_f32(const Dims& d, int64_t M, int64_t N, int64_t K, bool ta, bool tb, float alpha, Strided A,
                       Strided B, float* C, int64_t c_stride, bool accumulate) {
  DenseScratch& s = dense_scratch();
  const int64_t heads = d.heads();
  const float* a = A.batch_stride ? packed(s.a, static_cast<const float*>(A.p), heads, M * K, A.batch_stride)
                                  : static_cast<const float*>(A.p);
  const float* b = B.batch_stride ? packed(s.b, static_cast<const float*>(B.p), heads, K * N, B.batch_stride)
                                  : static_cast<const float*>(B.p);
  float* c = C;
  if (c_stride) {
    if (accumulate) packed(s.c, static_cast<const float*>(C), heads, M * N, c_stride);
    else s.c.resize(static_cast<size_t>(heads * M * N));
    c = s.c.data();
  }
  product(d, M, N, K, ta, tb, alpha, {a, 0}, {b, 0}, DType::f32, c, 0, accumulate);
  if (c_stride)
    for (int64_t h = 0; h < heads; ++h) std::copy_n(c + h * M * N, M * N, C + h * c_stride);
}

void product(const Dims& d, int64_t M, int64_t N, int64_t K, bool ta, bool tb, float alpha, Strided A, Strided B,
             DType type, float* C, int64_t c_stride, bool accumulate) {
  if (type == DType::f32 && (A.batch_stride || B.batch_stride || c_stride))
    return product_dense_f32(d, M, N, K, ta, tb, alpha, A, B, C, c_stride, accumulate);
  matmul(MatmulArgs::product(M, N, K, ta, tb)
             .with_batch(d.heads())
             .with_types(type, type)
             .with_alpha(alpha)
             .with_accumulate(accumulate)
             .with_batch_strides(A.batch_stride, B.batch_stride, c_stride),
         A.p, B.p, C);
}

struct Scratch {
  Buffer q, k, v, dy;
  std::vector<float> y, dq, dk, dv, s, dp;
  std::vector<uint16_t> p16, ds16;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// The operand for a block matrix [heads, nb, kend]: the fp32 values, or the
// bf16 codes the row pass wrote (bf16 products).
Strided operand(const std::vector<float>& x, const std::vector<uint16_t>& codes, bool bf16) {
  if (bf16) return {codes.data(), 0};
  return {x.data(), 0};
}

// S [heads, nb, kend] = q rows [r0, r0+nb) times k rows [0, kend), scaled.
void block_scores(const Dims& d, const Scratch& sc, int64_t r0, int64_t nb, int64_t kend, float* S) {
  const int64_t head = d.T * d.hs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  product(d, nb, kend, d.hs, false, true, scale, {sc.q.data(r0 * d.hs), head}, {sc.k.data(), head}, sc.q.type(), S,
          0, false);
}

// The keys rows [r0, r0 + nb) of a block need (see the top of the file).
int64_t block_key_end(const int32_t* key_len, int64_t longest, int64_t r0, int64_t nb) {
  return key_len ? longest : r0 + nb;
}

// key_len null: causal; else [B] keys kept per sequence, longest their max.
void blockwise_forward(float* out, float* lse, const float* qkv, const int32_t* key_len, int64_t longest,
                       const Dims& d, bool bf16_products) {
  const int64_t T = d.T, C = d.C;
  const DType type = bf16_products ? DType::bf16 : DType::f32;
  Scratch& sc = scratch();
  gather_heads(sc.q, qkv, 3 * C, 0, d, bf16_products);
  gather_heads(sc.k, qkv, 3 * C, C, d, bf16_products);
  gather_heads(sc.v, qkv, 3 * C, 2 * C, d, bf16_products);
  sc.y.resize(static_cast<size_t>(d.head_elems()));
  const int64_t block = std::min(kBlockRows, T), head = T * d.hs;
  sc.s.resize(static_cast<size_t>(d.heads() * block * T));
  if (bf16_products) sc.p16.resize(sc.s.size());
  for (int64_t r0 = 0; r0 < T; r0 += block) {
    const int64_t nb = std::min(block, T - r0), kend = block_key_end(key_len, longest, r0, nb), rows = d.heads() * nb;
    float* S = sc.s.data();
    uint16_t* P16 = sc.p16.data();
    block_scores(d, sc, r0, nb, kend, S);
    // Masked row softmax; row t = r0 + i keeps its first n keys, the rest are
    // exact zeros. Under bf16 products the probabilities go straight to bf16 codes.
#pragma omp parallel for schedule(static) if (parallel_rows(rows, kend))
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t h = r / nb, t = r0 + r % nb, n = kept_keys(key_len, h, t, d.NH);
      float* a = S + r * kend;
      const float mx = span_max(a, n);
      const float sum = span_exp_sum(a, a, n, mx);
      lse[h * T + t] = mx + std::log(sum);
      if (bf16_products) {
        uint16_t* p = P16 + r * kend;
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) p[j] = formats::round_bf16(a[j] * inv);
        std::fill(p + n, p + kend, uint16_t{0});
      } else {
        span_scale(a, n, 1.0f / sum);
        std::fill(a + n, a + kend, 0.0f);
      }
    }
    const Strided P = operand(sc.s, sc.p16, bf16_products);
    product(d, nb, d.hs, kend, false, false, 1.0f, P, {sc.v.data(), head}, type, sc.y.data() + r0 * d.hs, head,
            false);
  }
  scatter_heads(out, sc.y.data(), C, 0, d, false);
}

void blockwise_backward(float* dqkv, const float* dout, const float* qkv, const float* lse, const int32_t* key_len,
                        int64_t longest, const Dims& d, bool bf16_products) {
  const int64_t T = d.T, C = d.C;
  const DType type = bf16_products ? DType::bf16 : DType::f32;
  Scratch& sc = scratch();
  gather_heads(sc.q, qkv, 3 * C, 0, d, bf16_products);
  gather_heads(sc.k, qkv, 3 * C, C, d, bf16_products);
  gather_heads(sc.v, qkv, 3 * C, 2 * C, d, bf16_products);
  gather_heads(sc.dy, dout, C, 0, d, bf16_products);
  const size_t n_elems = static_cast<size_t>(d.head_elems());
  sc.dq.resize(n_elems);
  sc.dk.assign(n_elems, 0.0f);  // accumulated over query blocks; keys past every kend stay 0
  sc.dv.assign(n_elems, 0.0f);
  const int64_t block = std::min(kBlockRows, T), head = T * d.hs;
  sc.s.resize(static_cast<size_t>(d.heads() * block * T));
  sc.dp.resize(sc.s.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  if (bf16_products) {
    sc.p16.resize(sc.s.size());
    sc.ds16.resize(sc.s.size());
  }
  for (int64_t r0 = 0; r0 < T; r0 += block) {
    const int64_t nb = std::min(block, T - r0), kend = block_key_end(key_len, longest, r0, nb), rows = d.heads() * nb;
    float* S = sc.s.data();
    float* dP = sc.dp.data();
    uint16_t* P16 = sc.p16.data();
    uint16_t* dS16 = sc.ds16.data();
    block_scores(d, sc, r0, nb, kend, S);
    product(d, nb, kend, d.hs, false, true, 1.0f, {sc.dy.data(r0 * d.hs), head}, {sc.v.data(), head}, type, dP, 0,
            false);
    // P = exp(S - lse) on the kept keys; dS = P (dP - rowsum(P dP)) / sqrt(hs), into dP.
#pragma omp parallel for schedule(static) if (parallel_rows(rows, kend))
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t h = r / nb, t = r0 + r % nb, n = kept_keys(key_len, h, t, d.NH);
      float* p = S + r * kend;
      float* g = dP + r * kend;
      span_exp_sum(p, p, n, lse[h * T + t]);
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < n; ++j) dot += p[j] * g[j];
      if (bf16_products) {
        uint16_t* p16 = P16 + r * kend;
        uint16_t* g16 = dS16 + r * kend;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) {
          p16[j] = formats::round_bf16(p[j]);
          g16[j] = formats::round_bf16(p[j] * (g[j] - dot) * scale);
        }
        std::fill(p16 + n, p16 + kend, uint16_t{0});
        std::fill(g16 + n, g16 + kend, uint16_t{0});
      } else {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) g[j] = p[j] * (g[j] - dot) * scale;
        std::fill(p + n, p + kend, 0.0f);
        std::fill(g + n, g + kend, 0.0f);
      }
    }
    const Strided P = operand(sc.s, sc.p16, bf16_products);
    const Strided dS = operand(sc.dp, sc.ds16, bf16_products);
    const Strided dy_blk{sc.dy.data(r0 * d.hs), head}, q_blk{sc.q.data(r0 * d.hs), head};
    product(d, kend, d.hs, nb, true, false, 1.0f, P, dy_blk, type, sc.dv.data(), head, true);               // dV
    product(d, nb, d.hs, kend, false, false, 1.0f, dS, {sc.k.data(), head}, type, sc.dq.data() + r0 * d.hs,  // dQ
            head, false);
    product(d, kend, d.hs, nb, true, false, 1.0f, dS, q_blk, type, sc.dk.data(), head, true);  // dK
  }
  scatter_heads(dqkv, sc.dq.data(), 3 * C, 0, d, true);
  scatter_heads(dqkv, sc.dk.data(), 3 * C, C, d, true);
  scatter_heads(dqkv, sc.dv.data(), 3 * C, 2 * C, d, true);
}

double products_flops(const Dims& d, double products) {
  return products * static_cast<double>(d.heads() * d.T * d.T * d.hs);
}

}  // namespace

int64_t attention_block_rows() { return kBlockRows; }

bool attention_prefers_blockwise(int64_t B, int64_t T, int64_t NH, bool bf16_products, bool causal) {
  const double scores_bytes = static_cast<double>(B) * static_cast<double>(NH) * static_cast<double>(T) *
                              static_cast<double>(T) * (bf16_products ? 2.0 : 4.0);
  const int64_t min_t = causal ? (bf16_products ? kBlockwiseMinT_bf16 : kBlockwiseMinT_f32)
                               : (bf16_products ? kBlockwiseKeysMinT_bf16 : kBlockwiseKeysMinT_f32);
  return T >= min_t || scores_bytes > kBlockwiseScoresBytes;
}

void attention_forward_blockwise(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                                 int64_t NH, bool bf16_products) {
  const Dims d = check_dims(B, T, C, NH);
  cpu::profile::Scope profile_scope(cpu::profile::Category::attention, products_flops(d, 2.0));
  blockwise_forward(out, lse, qkv, nullptr, 0, d, bf16_products);
}

void attention_backward_blockwise(float* dqkv, const float* dout, const float* qkv, const float* lse, int64_t B,
                                  int64_t T, int64_t C, int64_t NH, bool bf16_products) {
  const Dims d = check_dims(B, T, C, NH);
  cpu::profile::Scope profile_scope(cpu::profile::Category::attention, products_flops(d, 5.0));
  blockwise_backward(dqkv, dout, qkv, lse, nullptr, 0, d, bf16_products);
}

void attention_forward_keys_blockwise(float* out, float* lse, const float* qkv, const int32_t* key_len, int64_t B,
                                      int64_t T, int64_t C, int64_t NH, bool bf16_products) {
  const Dims d = check_dims(B, T, C, NH);
  const int64_t longest = attention_detail::check_key_len(key_len, B, T);
  cpu::profile::Scope profile_scope(cpu::profile::Category::attention, products_flops(d, 4.0));
  blockwise_forward(out, lse, qkv, key_len, longest, d, bf16_products);
}

void attention_backward_keys_blockwise(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                       const int32_t* key_len, int64_t B, int64_t T, int64_t C, int64_t NH,
                                       bool bf16_products) {
  const Dims d = check_dims(B, T, C, NH);
  const int64_t longest = attention_detail::check_key_len(key_len, B, T);
  cpu::profile::Scope profile_scope(cpu::profile::Category::attention, products_flops(d, 10.0));
  blockwise_backward(dqkv, dout, qkv, lse, key_len, longest, d, bf16_products);
}

}  // namespace mantissa::kernels
