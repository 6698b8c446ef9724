// Matrix products through oneDNN. Primitives are cached per shape/type (alpha
// is a runtime argument, so per-tensor FP8 scales that change every step reuse
// one primitive); a constant operand (a weight) can be pre-packed once and
// reused until its version changes. bf16 inputs accumulate in fp32, by the
// route matmul_route.hpp picks for this CPU (oneDNN bf16 on AMX, else an fp32
// product over the exactly widened operands).
#pragma once

#include <cstdint>

#include "mantissa/tensor/tensor.hpp"

namespace mantissa::kernels {

struct MatmulArgs {
  // C [batch, M, N] = alpha * op(A) [batch, M, K] x op(B) [batch, K, N] (+ bias [N]) (+ beta * C)
  int64_t batch = 1, M = 0, N = 0, K = 0;
  bool trans_a = false;  // A stored [K, M] (per batch)
  bool trans_b = false;  // B stored [N, K] (per batch)
  DType a_type = DType::f32;  // f32, bf16 or f16, not bf16 with f16 (FP8 operands are widened to bf16 exactly by the caller)
  DType b_type = DType::f32;
  float alpha = 1.0f;
  bool accumulate = false;    // beta = 1: C += product
  bool b_is_constant = false; // B is a weight: may be pre-packed and cached
  const void* b_cache_key = nullptr;  // with b_is_constant: identity of B ...
  int b_cache_version = 0;            // ... and its version; a new version repacks
  // Elements between consecutive batch matrices of A, B and C; 0 = dense
  // (rows * cols). Lets a product run on a row range of every head at once
  // (blockwise attention). Rows keep their natural leading dimension. Strided
  // operands must already be in the product's type (no f32 -> bf16 widening).
  int64_t a_batch_stride = 0, b_batch_stride = 0, c_batch_stride = 0;

  // C [M, N] = A [M, K] x B [K, N], fp32 operands, alpha 1; trans_a / trans_b:
  // A stored [K, M] / B stored [N, K]. The with_ setters below add the rest.
  static MatmulArgs product(int64_t M, int64_t N, int64_t K, bool trans_a = false, bool trans_b = false) {
    MatmulArgs a;
    a.M = M;
    a.N = N;
    a.K = K;
    a.trans_a = trans_a;
    a.trans_b = trans_b;
    return a;
  }
  // C [M, N] = A [M, K] x B^T, B stored [N, K].
  static MatmulArgs product_bt(int64_t M, int64_t N, int64_t K) { return product(M, N, K, false, true); }
  MatmulArgs& with_batch(int64_t n) { return batch = n, *this; }
  MatmulArgs& with_types(DType a, DType b) { return a_type = a, b_type = b, *this; }
  MatmulArgs& with_alpha(float value) { return alpha = value, *this; }
  MatmulArgs& with_accumulate(bool on = true) { return accumulate = on, *this; }
  // B is the constant `key` at `version` (pre-packed and cached).
  MatmulArgs& with_constant_b(const void* key, int version) {
    b_is_constant = true;
    b_cache_key = key;
    b_cache_version = version;
    return *this;
  }
  MatmulArgs& with_batch_strides(int64_t a, int64_t b, int64_t c) {
    a_batch_stride = a;
    b_batch_stride = b;
    c_batch_stride = c;
    return *this;
  }
};

// C is fp32. bias may be null (fp32 [N]).
void matmul(const MatmulArgs& args, const void* A, const void* B, float* C, const float* bias = nullptr);

// How a product with alpha != 1 applies alpha (matmul.cpp says why each):
// post_op (binary multiply), output_scale (runtime output scale), separate
// (own pass after the unscaled product); none: alpha == 1. Each primitive takes
// the first of post_op, output_scale, separate that oneDNN implements without
// its reference kernel on this CPU.
enum class AlphaMode { none, post_op, output_scale, separate };
const char* alpha_mode_name(AlphaMode mode);
AlphaMode last_matmul_alpha_mode();  // of the last matmul
// Forces every scaled product created from now on to one mode (none: back to
// the choice above), for tests that check each mode against float64.
void force_alpha_mode(AlphaMode mode);

// Name of the oneDNN implementation the last matmul ran (e.g. "brg:avx512_core_amx_bf16";
// "f32_widened:brg:avx512_core" for bf16 values on the widened route).
const char* last_matmul_impl();
void clear_matmul_cache();

// Drops every packed copy of the constant operand `b_cache_key` (call it when
// the weight's storage is freed, so a new buffer at the same address with the
// same version cannot hit a stale packed copy). Packed copies live in the
// derived-value cache (tensor/derived_cache.hpp): this is its forget_source,
// which frees whatever else was derived from `b_cache_key` too.
void forget_packed_operand(const void* b_cache_key);
int64_t packed_operand_count();     // packed constant operands currently held
int64_t cached_matmul_primitives(); // primitives currently cached
// oneDNN matmul primitives created since the process started (never reset):
// in a steady training step this must stop growing.
int64_t matmul_primitives_created();

}  // namespace mantissa::kernels
