// Scale-propagation rules (Scalify, Balança et al. 2024; derivations for layer
// norm, softmax, GELU, attention and cross-entropy in
// docs/scale-propagation.md). Each rule takes per-tensor ScaledTensors and
// returns data and a power-of-two scale such that data x scale is the op's
// result, with data kept O(1) when the inputs' data are O(1). Data results
// are fp32 (cast() stores them in a format). Rules that round a scale take
// a Pow2Rounder (default rounding: down). Shapes in comments; "rows" ops act
// on the last dim of a [R, C] view.
//
// Definitions: src/scalify/propagate.cpp (linear ops, selection and layout,
// elementwise math, dispatch by name) and, for the derived rules, the
// propagate_<family>.cpp their section names.
#pragma once

#include <algorithm>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "mantissa/scalify/scaled.hpp"

namespace mantissa::scalify {

// Thrown when an op has no rule: never a silent unscaled fallback.
struct NoScaleRule : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// ---- linear ops ---------------------------------------------------------------------
// Zs = pow2_round(sqrt(a.s^2 + b.s^2)); data = (a.d a.s + b.d b.s) / Zs. A
// zero or inf operand is "any scale": the other operand's scale is taken.
ScaledTensor add(const ScaledTensor& a, const ScaledTensor& b, Pow2Rounder& r);
ScaledTensor sub(const ScaledTensor& a, const ScaledTensor& b, Pow2Rounder& r);
// x [R, C] + bias [C] broadcast over rows: the add rule with the bias's scale.
ScaledTensor add_bias(const ScaledTensor& x, const ScaledTensor& bias, Pow2Rounder& r);
// data op data, scale op scale.
ScaledTensor mul(const ScaledTensor& a, const ScaledTensor& b);
ScaledTensor div(const ScaledTensor& a, const ScaledTensor& b);
// a [M, K] @ b [K, N]: r = pow2_round(sqrt K); data = a.d @ b.d / r; scale = a.s b.s r.
ScaledTensor matmul(const ScaledTensor& a, const ScaledTensor& b, Pow2Rounder& r);
// Sum over the last dim (N = cols): data = sum / r, scale = s r, r = pow2_round(sqrt N).
ScaledTensor reduce_sum(const ScaledTensor& x, Pow2Rounder& r);

// ---- selection and layout ------------------------------------------------------------
// Elementwise max/min, select(cond != 0 ? a : b), concat along the last dim:
// the largest scale of the non-"any scale" operands.
ScaledTensor maximum(const ScaledTensor& a, const ScaledTensor& b);
ScaledTensor minimum(const ScaledTensor& a, const ScaledTensor& b);
ScaledTensor select(const Tensor& cond, const ScaledTensor& a, const ScaledTensor& b);
ScaledTensor concat(std::span<const ScaledTensor> xs);
// Scale passes through.
ScaledTensor reshape(const ScaledTensor& x, const Shape& shape);
ScaledTensor transpose(const ScaledTensor& x);  // [R, C] -> [C, R]
ScaledTensor slice_rows(const ScaledTensor& x, int64_t begin, int64_t end);
// out [N, C] = weight [V, C] rows at ids: the weight's scale.
ScaledTensor embedding(const Tensor& ids, const ScaledTensor& weight);
// out [N, C] = sum over tables i of tables[i] [V_i, C] rows at ids[i] (i32 [N] each): the
// embedding_sum scale rule; data = sum of values / that scale.
ScaledTensor embedding_sum(std::span<const Tensor> ids, std::span<const ScaledTensor> tables, Pow2Rounder& r);

// ---- elementwise math -------------------------------------------------------------------
ScaledTensor exp(const ScaledTensor& x);   // unscale, exp, scale 1
ScaledTensor log(const ScaledTensor& x);   // log d + log s, scale 1
ScaledTensor sqrt(const ScaledTensor& x);  // sqrt d, sqrt s (odd exponents move a 2 into the data)
ScaledTensor pow(const ScaledTensor& x, int y);  // d^y, s^y

// ---- derived rules (derivations in docs/scale-propagation.md) --------------------------------
// Activations (propagate_activations.cpp).
// GELU (tanh): |gelu(x)| <= |x|, so the input scale is kept:
// data = gelu(d s) / s. Backward: dx = dy gelu'(x), gelu' in [-0.13, 1.13]:
// dy's scale.
ScaledTensor gelu(const ScaledTensor& x);
ScaledTensor gelu_backward(const ScaledTensor& x, const ScaledTensor& dy);
// SiLU x sigmoid(x) on the values, the input's scale; backward: dy's scale.
ScaledTensor silu(const ScaledTensor& x);
ScaledTensor silu_backward(const ScaledTensor& x, const ScaledTensor& dy);
// SwiGLU silu(gate) * up (equal shapes): scale gate.s up.s. Backward: {d gate, d up}.
ScaledTensor swiglu(const ScaledTensor& gate, const ScaledTensor& up);
std::pair<ScaledTensor, ScaledTensor> swiglu_backward(const ScaledTensor& gate, const ScaledTensor& up,
                                                      const ScaledTensor& dy);

// Norms (propagate_norms.cpp).
// Layer norm of x [R, C] (eps 1e-5 on the values): normalisation removes x's
// scale (the data is normalised with eps / s^2, so exactly); the gain gives
// scale w.s, the bias joins by the add rule.
ScaledTensor layer_norm(const ScaledTensor& x, const ScaledTensor& w, const ScaledTensor& b, Pow2Rounder& r);
// dx = (w dy - mean(w dy) - n mean(w dy n)) / sigma: scale dy.s w.s / x.s
// (the op Scalify follows with a dynamic rescale: w's and x's scales drift).
ScaledTensor layer_norm_backward(const ScaledTensor& x, const ScaledTensor& w, const ScaledTensor& dy);
// RMS norm of x [R, C] with gain w [C]: the data is normalised with eps / x.s^2 (exact), the
// result has w's scale. Backward dx = (w dy - n mean(w dy n)) / rms: scale dy.s w.s / x.s.
ScaledTensor rms_norm(const ScaledTensor& x, const ScaledTensor& w, double eps);
ScaledTensor rms_norm_backward(const ScaledTensor& x, const ScaledTensor& w, const ScaledTensor& dy, double eps);

// Attention and its pieces (propagate_attention.cpp).
// Softmax over the last dim: values unscaled (as exp), result in [0, 1],
// scale 1. Backward dx = y (dy - sum(y dy)): dy's scale.
ScaledTensor softmax(const ScaledTensor& x);
ScaledTensor softmax_backward(const ScaledTensor& y, const ScaledTensor& dy);
// Causal self-attention, qkv [B, T, 3C] -> [B, T, C] with `heads` heads:
// scores unscaled to fp32 (softmax rule), output = P v with rows of P
// summing to 1, a convex combination of v: qkv's scale.
ScaledTensor causal_attention(const ScaledTensor& qkv, int64_t heads);
// Rotary position embedding of x [B, T, heads*D] (rotate-half pairs i, i + D/2, angle
// t theta^(-2i/D) at position t): the rotation acts on the data, the scale passes.
// inverse: the backward (rotation by -angle).
ScaledTensor rotary(const ScaledTensor& x, int64_t heads, double theta, bool inverse = false);
// Attention of q [B, T, H*D] over k, v [B, T, KV*D] (H a multiple of KV; query head h reads kv
// head h / (H/KV)), scores q.k / sqrt(D) unscaled to fp32: causal when key_len is null, else
// bidirectional over keys 0..key_len[b]-1 (i32 [B]). Output [B, T, H*D] at v's scale.
ScaledTensor attention(const ScaledTensor& q, const ScaledTensor& k, const ScaledTensor& v, int64_t heads,
                       const Tensor* key_len);

// The loss (propagate_loss.cpp).
// Cross-entropy, logits [N, V], targets i32 [N] (< 0 ignored): sum of
// -log softmax[target], scale 1 (log rule). Backward: dlogits =
// (softmax - onehot) dloss, entries in [-1, 1]: dloss's scale.
ScaledTensor cross_entropy(const ScaledTensor& logits, const Tensor& targets);
ScaledTensor cross_entropy_backward(const ScaledTensor& logits, const Tensor& targets, const ScaledTensor& dloss);

// ---- the rules on scales alone -------------------------------------------------------------
// The scale each rule above gives, from its inputs' scales only. The rules above take their
// result's scale from these, and so does the `propagate` quantiser (scalify_quantiser.hpp),
// which follows scales along a model without data. A scale of 0 stands for "any scale" (a
// tensor of zeros). Products of powers of two are exact in double.
namespace scale_rule {
// r(K) = pow2_round(sqrt K): what a sum of K unit terms grows by.
float sqrt_fan(int64_t K, Pow2Rounder& r);
// add / sub / add_bias: pow2_round(sqrt(a^2 + b^2)); an "any scale" operand takes the other's.
double add(double a, double b, Pow2Rounder& r);
// a [M, K] @ b [K, N] with rk = sqrt_fan(K): a b rk.
inline double matmul(double a, double b, double rk) { return a * b * rk; }
// Normalised values have scale 1: the gain's scale, joined with the shift's by the add rule.
inline double layer_norm(double gain, double bias, Pow2Rounder& r) { return add(gain, bias, r); }
// RMS norm: the normalised values have scale 1, times the gain's scale (layer norm without shift).
inline double rms_norm(double gain) { return gain; }
inline double gelu(double x) { return x; }
inline double gelu_backward(double dy) { return dy; }
// |silu(x)| <= |x|: the input's scale; silu' lies in [-0.1, 1.1]: dy's scale.
inline double silu(double x) { return x; }
inline double silu_backward(double dy) { return dy; }
// SwiGLU silu(gate) * up: the mul rule on silu's scale. Backward: d up = dy silu(gate) has
// dy.s gate.s; d gate = dy up silu'(gate) has dy.s up.s.
inline double swiglu(double gate, double up) { return silu(gate) * up; }
inline double swiglu_backward_up(double dy, double gate) { return dy * silu(gate); }
inline double swiglu_backward_gate(double dy, double up) { return silu_backward(dy) * up; }
// Rotary position embedding rotates pairs of channels (orthogonal): the scale passes, both ways.
inline double rotary(double x) { return x; }
// Attention softmax(q k^T c + mask) v, causal or key-padded: each row of probabilities sums to
// 1, so the output is a convex combination of v's rows: v's scale.
inline double attention(double v) { return v; }
// Backward, q, k, v from separate products: dV = P^T dO keeps dO's scale; dQ = dS K c and
// dK = dS^T Q c carry dO.s v.s and the other operand's scale. rg = sqrt_fan(G) when G query
// heads share each kv head (dK and dV sum G head gradients), else 1.
inline double attention_backward_value(double dout, double rg) { return dout * rg; }
inline double attention_backward_score(double dout, double v, double other, double rg) { return dout * v * other * rg; }
inline double causal_attention(double qkv) { return attention(qkv); }
// One fused qkv [dQ, dK, dV] of one scale: the concat rule takes the larger, dO.s max(1, qkv.s^2).
inline double causal_attention_backward(double dout, double qkv) {
  return std::max(attention_backward_value(dout, 1.0), attention_backward_score(dout, qkv, qkv, 1.0));
}
// A sum of embedding rows from several tables (BERT: word + segment + position): the add rule
// over all terms at once, pow2_round(sqrt(sum s_i^2)); zero tables ("any scale", 0) drop out.
double embedding_sum(std::span<const double> tables, Pow2Rounder& r);
}  // namespace scale_rule

// ---- dispatch by name ---------------------------------------------------------------------
// Ops of one or two scaled inputs by name ("add", "matmul", "gelu", ...);
// an op without a rule throws NoScaleRule naming it and listing the rules.
ScaledTensor apply(std::string_view op, std::span<const ScaledTensor> inputs, Pow2Rounder& r);
std::vector<std::string> ops_with_rules();

}  // namespace mantissa::scalify
