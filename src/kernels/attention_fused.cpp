// Per-head fp32 causal attention on AVX-512 or AVX2 register tiles (see attention_fused.hpp).
//
// Every product is C (+)= alpha * A B over a row block of at most kRows rows
// and up to 64 columns (four zmm accumulators per row, 24 in all; on AVX2 16
// columns, two ymm accumulators per row, 12 in all), where A is
// read through (row, k) strides so that A or A^T comes straight from memory
// and B is row-major. The k^T of q k^T and the v^T of dO v^T are transposed
// once per head into a small [hs, T] buffer. Causality decides the ranges:
// a row block [i0, i0 + R) needs score columns and P/dS columns below i0 + R
// only, and dV/dK rows from j0 on need only P/dS rows from j0 on; the entries
// the ranges include beyond the diagonal are the exact zeros of the masked
// softmax, so no product term is approximated.
//
// Per head (P = att, dO = dout head, S = scaled scores):
//   forward, per row block: S = q k^T / sqrt(hs); P = softmax(S); O = P v
//   backward, per row block: dP = dO v^T; dS = P (dP - rowsum(P dP)) / sqrt(hs); dQ += dS k
//   then per row block of keys: dV += P^T dO; dK += dS^T q
#include "kernels/attention_fused.hpp"
#include "cpu/target.hpp"
#include "mantissa/cpu/isa.hpp"

// GCC 12's AVX-512 intrinsics initialise their undefined-vector placeholder
// from itself, which -W(maybe-)uninitialized reports after inlining.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "kernels/row_math.hpp"
#include "mantissa/formats/bf16.hpp"
#include "mantissa/kernels/matmul_route.hpp"

#define MANTISSA_AVX512F __attribute__((target("avx512f")))

namespace mantissa::kernels::attention_detail {
namespace {

constexpr int kRows = 6;     // rows per register tile
constexpr int kVectors = 4;  // 16-float vectors per tile row (64 columns)

// A(r, k) = a[r * rs + k * ks]
struct Strided {
  const float* a;
  int64_t rs, ks;
};

// C [R, n] (+)= alpha * sum over k in [k0, k1) of A(r, k) B[k, 0:n), n <= 16 NV;
// the last vector's lanes beyond n are masked off.
template <int R, int NV>
MANTISSA_AVX512F void tile(float* c, int64_t ldc, Strided A, const float* b, int64_t ldb, int64_t k0, int64_t k1,
                           __mmask16 last, float alpha, bool accumulate) {
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const float* ak = A.a + k0 * A.ks;
  const float* bk = b + k0 * ldb;
  for (int64_t k = k0; k < k1; ++k, ak += A.ks, bk += ldb) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, bk + 16 * v) : _mm512_loadu_ps(bk + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(ak[r * A.rs]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? last : __mmask16{0xFFFF};
      float* cp = c + r * ldc + 16 * v;
      __m512 x = _mm512_mul_ps(acc[r][v], al);
      if (accumulate) x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, cp), x);
      _mm512_mask_storeu_ps(cp, m, x);
    }
}

using TileFn = void (*)(float*, int64_t, Strided, const float*, int64_t, int64_t, int64_t, __mmask16, float, bool);

template <int R, int... V>
constexpr std::array<TileFn, kVectors> tiles_of_rows(std::integer_sequence<int, V...>) {
  return {&tile<R, V + 1>...};
}
template <int... R>
constexpr std::array<std::array<TileFn, kVectors>, kRows> all_tiles(std::integer_sequence<int, R...>) {
  return {tiles_of_rows<R + 1>(std::make_integer_sequence<int, kVectors>{})...};
}
constexpr auto kTiles = all_tiles(std::make_integer_sequence<int, kRows>{});

// C [R, n] (+)= alpha * A [R, k0:k1) B [k0:k1, n), in column groups of 64.
void block512(float* c, int64_t ldc, Strided A, const float* b, int64_t ldb, int R, int64_t n, int64_t k0, int64_t k1,
           float alpha, bool accumulate) {
  for (int64_t c0 = 0; c0 < n; c0 += 16 * kVectors) {
    const int64_t w = std::min<int64_t>(16 * kVectors, n - c0);
    const int nv = static_cast<int>((w + 15) / 16);
    const int tail = static_cast<int>(w - 16 * (nv - 1));
    const __mmask16 last = static_cast<__mmask16>(tail == 16 ? 0xFFFFu : (1u << tail) - 1u);
    kTiles[static_cast<size_t>(R - 1)][static_cast<size_t>(nv - 1)](c + c0, ldc, A, b + c0, ldb, k0, k1, last,
                                                                    alpha, accumulate);
  }
}

// The AVX2 + FMA tiles: the same products on 8-float vectors, kRows rows by
// two vectors (12 ymm accumulators, 16 columns). Every entry of C is the same
// chain of fused multiply-adds over k in the same order as on AVX-512, then
// the same scaling and addition, so both tiers' products have the same bits.
namespace avx2 {

constexpr int kVectors = 2;

// Lanes [0, k) on, 1 <= k <= 8.
MANTISSA_AVX2 inline __m256i first_lanes(int k) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// As the AVX-512 tile, with the last vector's lanes from `tail` on left
// alone (the mask is built here: a ymm argument would cross the call from
// code compiled without AVX).
template <int R, int NV>
MANTISSA_AVX2 void tile(float* c, int64_t ldc, Strided A, const float* b, int64_t ldb, int64_t k0, int64_t k1,
                        int tail, float alpha, bool accumulate) {
  const __m256i last = first_lanes(tail);
  __m256 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  const float* ak = A.a + k0 * A.ks;
  const float* bk = b + k0 * ldb;
  for (int64_t k = k0; k < k1; ++k, ak += A.ks, bk += ldb) {
    __m256 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      bv[v] = v == NV - 1 ? _mm256_maskload_ps(bk + 8 * v, last) : _mm256_loadu_ps(bk + 8 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(ak + r * A.rs);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const __m256 al = _mm256_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      float* cp = c + r * ldc + 8 * v;
      __m256 x = _mm256_mul_ps(acc[r][v], al);
      if (v < NV - 1 || tail == 8) {
        if (accumulate) x = _mm256_add_ps(_mm256_loadu_ps(cp), x);
        _mm256_storeu_ps(cp, x);
      } else {
        if (accumulate) x = _mm256_add_ps(_mm256_maskload_ps(cp, last), x);
        _mm256_maskstore_ps(cp, last, x);
      }
    }
}

using TileFn = void (*)(float*, int64_t, Strided, const float*, int64_t, int64_t, int64_t, int, float, bool);

template <int R, int... V>
constexpr std::array<TileFn, kVectors> tiles_of_rows(std::integer_sequence<int, V...>) {
  return {&tile<R, V + 1>...};
}
template <int... R>
constexpr std::array<std::array<TileFn, kVectors>, kRows> all_tiles(std::integer_sequence<int, R...>) {
  return {tiles_of_rows<R + 1>(std::make_integer_sequence<int, kVectors>{})...};
}
constexpr auto kTiles = all_tiles(std::make_integer_sequence<int, kRows>{});

void block(float* c, int64_t ldc, Strided A, const float* b, int64_t ldb, int R, int64_t n, int64_t k0, int64_t k1,
           float alpha, bool accumulate) {
  for (int64_t c0 = 0; c0 < n; c0 += 8 * kVectors) {
    const int64_t w = std::min<int64_t>(8 * kVectors, n - c0);
    const int nv = static_cast<int>((w + 7) / 8);
    const int tail = static_cast<int>(w - 8 * (nv - 1));
    kTiles[static_cast<size_t>(R - 1)][static_cast<size_t>(nv - 1)](c + c0, ldc, A, b + c0, ldb, k0, k1, tail,
                                                                    alpha, accumulate);
  }
}

}  // namespace avx2

// C [R, n] (+)= alpha * A [R, k0:k1) B [k0:k1, n) on the widest tiles the
// active ISA allows (fused_available() holds).
void block(float* c, int64_t ldc, Strided A, const float* b, int64_t ldb, int R, int64_t n, int64_t k0, int64_t k1,
           float alpha, bool accumulate) {
  if (cpu::active_isa() >= cpu::Isa::avx512) block512(c, ldc, A, b, ldb, R, n, k0, k1, alpha, accumulate);
  else avx2::block(c, ldc, A, b, ldb, R, n, k0, k1, alpha, accumulate);
}

// dst [hs, T] = src rows [T, hs] (row stride ld) transposed.
void transpose(float* dst, const float* src, int64_t ld, int64_t T, int64_t hs) {
  for (int64_t j = 0; j < T; ++j)
    for (int64_t i = 0; i < hs; ++i) dst[i * T + j] = src[j * ld + i];
}

std::vector<float>& head_scratch(int64_t n) {
  thread_local std::vector<float> s;
  s.resize(static_cast<size_t>(n));
  return s;
}

// x [n] rounded to bf16 values, kept in fp32 (nearest even, as the matmul's
// bf16 operands are): exact products of them are the bf16 products.
void round_to_bf16_values(float* y, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = formats::widen_bf16(formats::round_bf16(x[i]));
}

std::vector<float>& rounded_scratch(int64_t n) {
  thread_local std::vector<float> s;
  s.resize(static_cast<size_t>(n));
  return s;
}

// One head: q, k, v rows of stride ldq; o rows of stride ldo; p [T, T] the
// fp32 probabilities. With bf16 operands, q, k and v hold bf16 values already
// and P is rounded to bf16 for P v (into pr [kRows, T]); p16, when given,
// receives those bf16 codes of P.
void head_forward(float* o, int64_t ldo, float* p, const float* q, const float* k, const float* v, int64_t ldq,
                  int64_t T, int64_t hs, float scale, float* pr, uint16_t* p16) {
  float* kt = head_scratch(hs * T).data();
  transpose(kt, k, ldq, T, hs);
  for (int64_t i0 = 0; i0 < T; i0 += kRows) {
    const int R = static_cast<int>(std::min<int64_t>(kRows, T - i0));
    const int64_t n = i0 + R;  // causal: no later key is needed
    block(p + i0 * T, T, {q + i0 * ldq, ldq, 1}, kt, T, R, n, 0, hs, scale, false);
    for (int r = 0; r < R; ++r) {  // masked row softmax: columns past t become exact zeros
      const int64_t t = i0 + r;
      float* a = p + t * T;
      const float mx = span_max(a, t + 1);
      const float sum = span_exp_sum(a, a, t + 1, mx);
      span_scale(a, t + 1, 1.0f / sum);
      std::fill(a + t + 1, a + T, 0.0f);
      if (pr) round_to_bf16_values(pr + r * T, a, n);
      if (p16) span_to_bf16(p16 + t * T, a, T);
    }
    const Strided P = pr ? Strided{pr, T, 1} : Strided{p + i0 * T, T, 1};
    block(o + i0 * ldo, ldo, P, v, ldq, R, hs, 0, n, 1.0f, false);
  }
}

// One head's gradients, added into dq, dk, dv (rows of stride ldg); ds [T, T] scratch.
// With bf16 operands, dout, q, k and v hold bf16 values, pr [T, T] is P
// rounded to bf16, and dS is rounded to bf16 as it is made.
void head_backward(float* dq, float* dk, float* dv, int64_t ldg, float* ds, const float* dout, int64_t ldo,
                   const float* p, const float* q, const float* k, const float* v, int64_t ldq, int64_t T, int64_t hs,
                   float scale, const float* pr) {
  float* vt = head_scratch(hs * T).data();
  transpose(vt, v, ldq, T, hs);
  for (int64_t i0 = 0; i0 < T; i0 += kRows) {
    const int R = static_cast<int>(std::min<int64_t>(kRows, T - i0));
    const int64_t n = i0 + R;
    block(ds + i0 * T, T, {dout + i0 * ldo, ldo, 1}, vt, T, R, n, 0, hs, 1.0f, false);  // dP
    for (int r = 0; r < R; ++r) {
      const int64_t t = i0 + r;
      causal_softmax_backward_row(ds + t * T, p + t * T, t, T, scale);
      if (pr) round_to_bf16_values(ds + t * T, ds + t * T, n);
    }
    block(dq + i0 * ldg, ldg, {ds + i0 * T, T, 1}, k, ldq, R, hs, 0, n, 1.0f, true);  // dQ += dS k
  }
  const float* P = pr ? pr : p;
  for (int64_t j0 = 0; j0 < T; j0 += kRows) {  // key rows: only query rows from j0 on reach them
    const int R = static_cast<int>(std::min<int64_t>(kRows, T - j0));
    block(dv + j0 * ldg, ldg, {P + j0, 1, T}, dout, ldo, R, hs, j0, T, 1.0f, true);  // dV += P^T dO
    block(dk + j0 * ldg, ldg, {ds + j0, 1, T}, q, ldq, R, hs, j0, T, 1.0f, true);    // dK += dS^T q
  }
}

// The qkv (or dout) every head reads: x itself, or with bf16 operands a
// rounded copy in `copy`.
const float* operand_rows(std::vector<float>& copy, const float* x, int64_t n, bool bf16) {
  if (!bf16) return x;
  copy.resize(static_cast<size_t>(n));
  float* y = copy.data();
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16))
  for (int64_t i0 = 0; i0 < n; i0 += 4096) round_to_bf16_values(y + i0, x + i0, std::min<int64_t>(4096, n - i0));
  return y;
}

std::vector<float>& qkv_copy() {
  thread_local std::vector<float> s;
  return s;
}
std::vector<float>& dout_copy() {
  thread_local std::vector<float> s;
  return s;
}

// Forward over every head. att: the fp32 probabilities, or null when only
// att16 (their bf16 codes) is wanted.
void forward_heads(float* out, float* att, uint16_t* att16, const float* qkv, const Dims& d, bool bf16) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  const int64_t T = d.T, C = d.C;
  const float* x = operand_rows(qkv_copy(), qkv, d.B * T * 3 * C, bf16);
#pragma omp parallel for schedule(static) if (d.heads() > 1)
  for (int64_t bh = 0; bh < d.heads(); ++bh) {
    const int64_t b = bh / d.NH, h = bh % d.NH;
    const float* q = x + b * T * 3 * C + h * d.hs;
    // pr [kRows, T]: the rounded row block; then p [T, T] when att is not kept
    float* scratch = bf16 ? rounded_scratch(kRows * T + (att ? 0 : T * T)).data() : nullptr;
    float* p = att ? att + bh * T * T : scratch + kRows * T;
    head_forward(out + b * T * C + h * d.hs, C, p, q, q + C, q + 2 * C, 3 * C, T, d.hs, scale, scratch,
                 att16 ? att16 + bh * T * T : nullptr);
  }
}

// Backward over every head; the probabilities as fp32 (att) or bf16 codes (att16).
void backward_heads(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                    const uint16_t* att16, const Dims& d, bool bf16) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  const int64_t T = d.T, C = d.C;
  const float* x = operand_rows(qkv_copy(), qkv, d.B * T * 3 * C, bf16);
  const float* g = operand_rows(dout_copy(), dout, d.B * T * C, bf16);
#pragma omp parallel for schedule(static) if (d.heads() > 1)
  for (int64_t bh = 0; bh < d.heads(); ++bh) {
    const int64_t b = bh / d.NH, h = bh % d.NH;
    const int64_t at = b * T * 3 * C + h * d.hs;
    const float* q = x + at;
    float* gq = dqkv + at;
    const float* p = att ? att + bh * T * T : nullptr;
    float* pr = nullptr;
    if (bf16) {  // P in bf16 values: widened codes, or the fp32 P rounded
      pr = rounded_scratch(T * T).data();
      if (att16) span_from_bf16(pr, att16 + bh * T * T, T * T);
      else round_to_bf16_values(pr, p, T * T);
      if (!p) p = pr;
    }
    head_backward(gq, gq + C, gq + 2 * C, 3 * C, datt + bh * T * T, g + b * T * C + h * d.hs, C, p, q, q + C,
                  q + 2 * C, 3 * C, T, d.hs, scale, pr);
  }
}

}  // namespace

bool fused_available() { return cpu::active_isa() >= cpu::Isa::avx2; }

const char* fused_implementation() {
  const cpu::Isa isa = cpu::active_isa();
  return isa >= cpu::Isa::avx512 ? "avx512:attention" : isa >= cpu::Isa::avx2 ? "avx2:attention" : "none";
}

bool fused_takes_bf16() { return fused_available() && bf16_route() == Bf16Route::f32_widened; }

void fused_forward(float* out, float* att, const float* qkv, const Dims& d, bool bf16) {
  forward_heads(out, att, nullptr, qkv, d, bf16);
}

void fused_forward_bf16(float* out, uint16_t* att16, const float* qkv, const Dims& d) {
  forward_heads(out, nullptr, att16, qkv, d, true);
}

void fused_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, const Dims& d,
                    bool bf16) {
  backward_heads(dqkv, datt, dout, qkv, att, nullptr, d, bf16);
}

void fused_backward_bf16(float* dqkv, float* datt, const float* dout, const float* qkv, const uint16_t* att16,
                         const Dims& d) {
  backward_heads(dqkv, datt, dout, qkv, nullptr, att16, d, true);
}

}  // namespace mantissa::kernels::attention_detail
