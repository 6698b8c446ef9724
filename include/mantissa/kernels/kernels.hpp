// Compute kernels on raw row-major buffers, llm.c style: each layer's forward
// and backward side by side, shapes in the comments. Backward kernels ADD
// into the input gradients (+=) so that fan-out needs no extra pass.
// Threaded with OpenMP; matrix products go through oneDNN (matmul.hpp).
#pragma once

#include <cstdint>

#include "mantissa/formats/lookup.hpp"

namespace mantissa::kernels {

// ---- elementwise -----------------------------------------------------------
void add(float* out, const float* a, const float* b, int64_t n);        // out = a + b
void add_inplace(float* acc, const float* x, int64_t n);                // acc += x
void scale(float* out, const float* x, float alpha, int64_t n);         // out = alpha x
void axpy(float* acc, const float* x, float alpha, int64_t n);          // acc += alpha x
void mul(float* out, const float* a, const float* b, int64_t n);        // out = a * b
// out = alpha a + beta b, or out += it when accumulate: a unit-scaled residual
// add (or its backward) in one pass instead of a scale plus an add.
void axpby(float* out, const float* a, float alpha, const float* b, float beta, int64_t n, bool accumulate);
// x [rows, segs * C]: out (+)= scales[s] x on segment s of every row (the
// u-muP attention's q | k | v multipliers in the one pass that copies qkv).
void scale_segments(float* out, const float* x, const float* scales, int segs, int64_t rows, int64_t C,
                    bool accumulate);

// SwiGLU: out = alpha silu(gate) up (silu(g) = g sigmoid(g)), and its
// backward, accumulating: dup += alpha silu(g) dy, dgate += beta s (1 + g (1 - s)) up dy
// with s = sigmoid(g) (either output may be null). Sigmoid as vec_math's vexp.
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n, float alpha);
void swiglu_backward(float* dgate, float* dup, const float* gate, const float* up, const float* dy, int64_t n,
                     float alpha, float beta);
// The same with gate and up stored as bf16 codes (exactly widened).
void swiglu_backward_bf16x(float* dgate, float* dup, const uint16_t* gate16, const uint16_t* up16, const float* dy,
                           int64_t n, float alpha, float beta);

// GELU in two forms: tanh, the approximation 0.5 x (1 + tanh(sqrt(2/pi) (x
// + 0.044715 x^3))) (GPT-2, transformers' "gelu_new"), and erf, the exact x
// Phi(x) (transformers' "gelu", BERT's), the same bits on every instruction
// set (src/kernels/gelu_erf.hpp). `scale` multiplies the output (forward) or
// dout (backward) in the same pass (unit scaling); 1 keeps the bits.
enum class GeluForm : uint8_t { tanh, erf };
void gelu_forward(float* out, const float* x, int64_t n, float scale = 1.0f, GeluForm form = GeluForm::tanh);
// The GELU implementation the active instruction set selects: "avx512:gelu",
// "avx2:gelu" or "generic:gelu" (compiler-vectorised); "...:gelu_erf" for erf.
const char* gelu_implementation();
const char* gelu_implementation(GeluForm form);
// dx += gelu'(x) scale dout
void gelu_backward(float* dx, const float* x, const float* dout, int64_t n, float scale = 1.0f,
                   GeluForm form = GeluForm::tanh);
// The same with x stored as bf16 codes (exactly widened).
void gelu_backward_bf16x(float* dx, const uint16_t* x16, const float* dout, int64_t n, float scale = 1.0f,
                         GeluForm form = GeluForm::tanh);
// dx = gelu'(x) scale dout, overwriting dx, which may be dout: the gradient
// computed in place of the output's (the same bits as += into zeros).
void gelu_backward_into(float* dx, const float* x, const float* dout, int64_t n, float scale = 1.0f,
                        GeluForm form = GeluForm::tanh);
void gelu_backward_bf16x_into(float* dx, const uint16_t* x16, const float* dout, int64_t n, float scale = 1.0f,
                              GeluForm form = GeluForm::tanh);
// x kept as 1-byte codes: x = bf16 value table[code] x fold (a power of two),
// decoded block by block on the stack; dx = or += as `accumulate`.
void gelu_backward_codes(float* dx, const uint8_t* codes, const formats::Table16& table, float fold,
                         const float* dout, int64_t n, bool accumulate, float scale = 1.0f,
                         GeluForm form = GeluForm::tanh);
void relu_forward(float* out, const float* x, int64_t n);
void relu_backward(float* dx, const float* x, const float* dout, int64_t n);

// Dropout with a counter-based RNG: element i of call `offset` is kept with
// probability 1-p, independent of threading; mask is recomputable from (seed, offset).
void dropout_forward(float* out, const float* x, float p, uint64_t seed, uint64_t offset, int64_t n);
void dropout_backward(float* dx, const float* dout, float p, uint64_t seed, uint64_t offset, int64_t n);
// Whether element i of the dropout call (seed, offset) is kept (the mask both passes use).
bool dropout_kept(float p, uint64_t seed, uint64_t offset, int64_t i);

// ---- rows: x [N, C] ----------------------------------------------------------
// out [N, C]; mean, rstd [N] saved for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps = 1e-5f);
void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);
// The same with x stored as bf16 codes (exactly widened, row by row).
void layernorm_backward_bf16x(float* dx, float* dweight, float* dbias, const float* dout, const uint16_t* x16,
                              const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);
// The same with x stored as 1-byte codes: x = bf16 value table[code] x fold,
// decoded row by row into the thread's scratch.
void layernorm_backward_codes(float* dx, float* dweight, float* dbias, const float* dout, const uint8_t* codes,
                              const formats::Table16& table, float fold, const float* weight, const float* mean,
                              const float* rstd, int64_t N, int64_t C);

// RMSNorm: out [N, C] = alpha x rinv w, rinv [N] = 1/sqrt(mean(x^2) + eps) saved for backward;
// dx += bx rinv (w dout - xh mean(xh w dout)), dweight += bw sum_rows xh dout, xh = x rinv (dx may be null).
void rmsnorm_forward(float* out, float* rinv, const float* x, const float* weight, float alpha, int64_t N, int64_t C,
                     float eps);
void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rinv, float bx, float bw, int64_t N, int64_t C);
// The same with x stored as bf16 codes (exactly widened, row by row).
void rmsnorm_backward_bf16x(float* dx, float* dweight, const float* dout, const uint16_t* x16, const float* weight,
                            const float* rinv, float bx, float bw, int64_t N, int64_t C);

// out [N, C] = x [N, C] + bias [C]; dbias [C] += column sums of dout [N, C].
void bias_add(float* out, const float* x, const float* bias, int64_t N, int64_t C);
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C);

// Row softmax of x [N, C]; backward: dx += y * (dy - sum(dy * y)).
void softmax_forward(float* y, const float* x, int64_t N, int64_t C);
void softmax_backward(float* dx, const float* y, const float* dy, int64_t N, int64_t C);

// Fused softmax cross-entropy over logits [N, V] with integer targets [N]
// (target < 0 = ignored). losses [N] get -log p[target] (0 when ignored);
// returns the fp64 sum over counted rows and sets *count. If dlogits is not
// null it is OVERWRITTEN with grad_scale * (softmax - onehot) (0 rows when ignored).
double cross_entropy(const float* logits, const int32_t* targets, int64_t N, int64_t V,
                     float grad_scale, float* losses, float* dlogits, int64_t* count);

// ---- embeddings ----------------------------------------------------------------
// out [B*T, C] = scale (wte[tokens] + wpe[t]); tokens [B, T]. Scales of 1
// multiply exactly (unit scaling's multipliers ride in the same pass).
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C, float scale = 1.0f);
// dwte [V, C] += wte_scale x scatter of dout rows; dwpe [T, C] += wpe_scale x
// sum over batch. Either may be null.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C, float wte_scale = 1.0f, float wpe_scale = 1.0f);

// ---- causal multi-head attention --------------------------------------------------
// qkv [B, T, 3C] (q | k | v, each C = NH heads x hs); out [B, T, C].
// att [B, NH, T, T] keeps the softmax probabilities for backward (row t uses
// columns <= t; the rest are written as 0). Scores are scaled by 1/sqrt(hs).
// bf16_products: the four products per pass take bf16-rounded operands (q, k,
// v, dout, probabilities, score gradients) with fp32 accumulation (AMX);
// softmax and its backward stay fp32.
void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, bool bf16_products = false);
// dqkv [B, T, 3C] += gradient; datt is scratch of att's size.
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int64_t B, int64_t T, int64_t C, int64_t NH,
                        bool bf16_products = false);
// bf16 products with the probabilities kept as bf16 codes att16 [B, NH, T, T]
// (made once, used as operand and by backward); same bits as the functions
// above with bf16_products and att rounded to bf16. datt is fp32 scratch.
void attention_forward_bf16(float* out, uint16_t* att16, const float* qkv, int64_t B, int64_t T, int64_t C,
                            int64_t NH);
void attention_backward_bf16(float* dqkv, float* datt, const float* dout, const float* qkv, const uint16_t* att16,
                             int64_t B, int64_t T, int64_t C, int64_t NH);

// Bidirectional attention with right padding (BERT): row t of sequence b
// attends to keys 0..key_len[b]-1 (1 <= key_len[b] <= T, else
// std::invalid_argument); att columns from key_len[b] on are 0. Scores,
// products and backward as attention_forward/backward.
void attention_forward_keys(float* out, float* att, const float* qkv, const int32_t* key_len, int64_t B, int64_t T,
                            int64_t C, int64_t NH, bool bf16_products = false);
void attention_backward_keys(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                             const int32_t* key_len, int64_t B, int64_t T, int64_t C, int64_t NH,
                             bool bf16_products = false);

// Blockwise (flash-style) causal attention: the same maths computed per block
// of attention_block_rows() query rows, over all heads at once, so the
// T x T probabilities are never stored whole. Forward keeps lse [B, NH, T]
// (log-sum-exp of each row's scaled, masked scores); backward recomputes the
// probabilities of each block from q, k and lse. Scratch is about
// 2 * B*NH * block * T floats instead of 2 * B*NH * T*T. bf16_products as above
// (bf16 operands incl. probabilities and score gradients, fp32 softmax).
void attention_forward_blockwise(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                                 int64_t NH, bool bf16_products = false);
// dqkv [B, T, 3C] += gradient.
void attention_backward_blockwise(float* dqkv, const float* dout, const float* qkv, const float* lse, int64_t B,
                                  int64_t T, int64_t C, int64_t NH, bool bf16_products = false);
// Blockwise key-padded attention (BERT): attention_forward_keys' maths (every
// row of sequence b keeps keys 0..key_len[b]-1, padded query rows included)
// with lse [B, NH, T] kept instead of the probabilities, as above.
void attention_forward_keys_blockwise(float* out, float* lse, const float* qkv, const int32_t* key_len, int64_t B,
                                      int64_t T, int64_t C, int64_t NH, bool bf16_products = false);
// dqkv [B, T, 3C] += gradient; padded keys get none.
void attention_backward_keys_blockwise(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                       const int32_t* key_len, int64_t B, int64_t T, int64_t C, int64_t NH,
                                       bool bf16_products = false);
int64_t attention_block_rows();
// Whether the blockwise path should replace the whole-scores one for this
// shape (T at least the measured cross-over of the product type and mask,
// causal or key-padded, or scores over 256 MiB; see bench/bench_attention.cpp).
bool attention_prefers_blockwise(int64_t B, int64_t T, int64_t NH, bool bf16_products = false, bool causal = true);

// ---- reductions -------------------------------------------------------------------------
double sum(const float* x, int64_t n);            // fp64 accumulation
double sum_squares(const float* x, int64_t n);    // fp64 accumulation
bool all_finite(const float* x, int64_t n);

// ---- bf16 storage (round to nearest even, NaN stays NaN) ------------------------------
void f32_to_bf16(uint16_t* out, const float* in, int64_t n);
void bf16_to_f32(float* out, const uint16_t* in, int64_t n);

int num_threads();
// Largest thread count set_num_threads accepts: 4 per processor, in [64, 1024].
int max_threads();
// OpenMP and oneDNN both follow it; throws std::invalid_argument outside [1, max_threads()].
void set_num_threads(int64_t n);

}  // namespace mantissa::kernels
