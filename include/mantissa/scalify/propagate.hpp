// Scale-propagation rules (Scalify, Balança et al. 2024; derivations for layer
// norm, softmax, GELU, attention and cross-entropy in
// docs/scale-propagation.md). Each rule takes per-tensor ScaledTensors and
// returns data and a power-of-two scale such that data x scale is the op's
// result, with data kept O(1) when the inputs' data are O(1). Data results
// are fp32 (cast() stores them in a format). Rules that round a scale take
// a Pow2Rounder (default rounding: down). Shapes in comments; "rows" ops act
// on the last dim of a [R, C] view.
#pragma once

#include <algorithm>
#include <span>
#include <string_view>
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

// ---- elementwise math -------------------------------------------------------------------
ScaledTensor exp(const ScaledTensor& x);   // unscale, exp, scale 1
ScaledTensor log(const ScaledTensor& x);   // log d + log s, scale 1
ScaledTensor sqrt(const ScaledTensor& x);  // sqrt d, sqrt s (odd exponents move a 2 into the data)
ScaledTensor pow(const ScaledTensor& x, int y);  // d^y, s^y

// ---- derived rules (docs/scale-propagation.md) ---------------------------------------------
// GELU (tanh): |gelu(x)| <= |x|, so the input scale is kept:
// data = gelu(d s) / s. Backward: dx = dy gelu'(x), gelu' in [-0.13, 1.13]:
// dy's scale.
ScaledTensor gelu(const ScaledTensor& x);
ScaledTensor gelu_backward(const ScaledTensor& x, const ScaledTensor& dy);
// Layer norm of x [R, C] (eps 1e-5 on the values): normalisation removes x's
// scale (the data is normalised with eps / s^2, so exactly); the gain gives
// scale w.s, the bias joins by the add rule.
ScaledTensor layer_norm(const ScaledTensor& x, const ScaledTensor& w, const ScaledTensor& b, Pow2Rounder& r);
// dx = (w dy - mean(w dy) - n mean(w dy n)) / sigma: scale dy.s w.s / x.s
// (the op Scalify follows with a dynamic rescale: w's and x's scales drift).
ScaledTensor layer_norm_backward(const ScaledTensor& x, const ScaledTensor& w, const ScaledTensor& dy);
// Softmax over the last dim: values unscaled (as exp), result in [0, 1],
// scale 1. Backward dx = y (dy - sum(y dy)): dy's scale.
ScaledTensor softmax(const ScaledTensor& x);
ScaledTensor softmax_backward(const ScaledTensor& y, const ScaledTensor& dy);
// Causal self-attention, qkv [B, T, 3C] -> [B, T, C] with `heads` heads:
// scores unscaled to fp32 (softmax rule), output = P v with rows of P
// summing to 1, a convex combination of v: qkv's scale.
ScaledTensor causal_attention(const ScaledTensor& qkv, int64_t heads);
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
inline double gelu(double x) { return x; }
inline double gelu_backward(double dy) { return dy; }
inline double causal_attention(double qkv) { return qkv; }
// d(qkv) = [dQ, dK, dV]: dV keeps dO's scale, dQ and dK carry dO.s qkv.s^2; the concat rule
// takes the larger.
inline double causal_attention_backward(double dout, double qkv) { return dout * std::max(1.0, qkv * qkv); }
}  // namespace scale_rule

// ---- dispatch by name ---------------------------------------------------------------------
// Ops of one or two scaled inputs by name ("add", "matmul", "gelu", ...);
// an op without a rule throws NoScaleRule naming it and listing the rules.
ScaledTensor apply(std::string_view op, std::span<const ScaledTensor> inputs, Pow2Rounder& r);
std::vector<std::string> ops_with_rules();

}  // namespace mantissa::scalify
