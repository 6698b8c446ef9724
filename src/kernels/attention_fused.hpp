// Whole-scores causal attention with fp32 products, one head at a time
// (attention_fused.cpp): the products run on AVX-512 or AVX2 register tiles straight
// from the qkv rows, skip the masked upper triangle, and each row block is
// multiplied, normalised and multiplied again while it is in L1, instead of
// gathering heads and passing the [heads, T, T] scores through memory between
// batched oneDNN products (which attention.cpp still does for bf16 products and
// on CPUs without AVX2). Same maths, only the fp32 summation order differs
// (from oneDNN's). Where bf16 products take the f32_widened route (no fast
// bf16 dot product: AVX2, Intel AVX-512 without AMX), they run here too, on
// operands rounded to bf16 values (q, k, v, dO, P and dS, each once, nearest
// even): the same exact products and fp32 sums as the widened batched path. The AVX-512 and AVX2 tiles compute the same products bit
// for bit; the softmax spans (row_math.hpp) differ in FMA use and sum order.
#pragma once

#include "kernels/attention_heads.hpp"

namespace mantissa::kernels::attention_detail {

bool fused_available();              // the active ISA has AVX2 (+ FMA) or AVX-512F
const char* fused_implementation();  // "avx512:attention", "avx2:attention" or "none"

// Whether bf16 products run here: fused_available() and the f32_widened route.
bool fused_takes_bf16();

// out [B, T, C] = causal_softmax(q k^T / sqrt(hs)) v; att [B, NH, T, T] the
// fp32 probabilities; bf16: the products' operands rounded to bf16.
void fused_forward(float* out, float* att, const float* qkv, const Dims& d, bool bf16 = false);
// The same with bf16 products, keeping only att16 = bf16(att).
void fused_forward_bf16(float* out, uint16_t* att16, const float* qkv, const Dims& d);
// dqkv [B, T, 3C] += gradients; datt [B, NH, T, T] is scratch (left holding dS).
void fused_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, const Dims& d,
                    bool bf16 = false);
// The same with bf16 products from the bf16 probabilities att16.
void fused_backward_bf16(float* dqkv, float* datt, const float* dout, const float* qkv, const uint16_t* att16,
                         const Dims& d);

}  // namespace mantissa::kernels::attention_detail
