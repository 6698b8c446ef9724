// Differentiable ops. Each takes the Tape (which carries the precision policy
// and dropout stream) and Vars, returns a Var, and records its backward when
// an input needs a gradient. Values are fp32 row-major; shapes in comments.
// Forward and backward of each op sit side by side in src/autograd/ops_*.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "mantissa/autograd/policy.hpp"
#include "mantissa/autograd/tape.hpp"
#include "mantissa/kernels/kernels.hpp"

namespace mantissa::autograd {

// ---- matrix products (compute dtype = policy.matmul, fp32 accumulation) --------------
// y [..., out] = forward * (x [..., in] @ w [in, out]) + b [out]; w as Hugging Face Conv1D.
// Backward: dx = backward * dy @ w^T, dw = weight * x^T @ dy, db = weight * sum dy
// (the backward multipliers replace `forward`, as in unit scaling; for the exact
// gradient of a scaled product pass backward = weight = forward).
Var linear(Tape& t, const Var& x, const Var& w, const Var* b = nullptr, const OpScales& s = {});
// c [M, N] = forward * op(a) @ op(b); a [M, K] (or [K, M] when trans_a), b [K, N] (or [N, K]
// when trans_b). Backward: da x= backward, db x= weight (see linear).
Var matmul(Tape& t, const Var& a, const Var& b, bool trans_a = false, bool trans_b = false,
           const OpScales& s = {});
// Batched: a [batch, M, K], b [batch, K, N] (same transposition rules per batch).
Var bmm(Tape& t, const Var& a, const Var& b, bool trans_a = false, bool trans_b = false,
        const OpScales& s = {});

// ---- pointwise ---------------------------------------------------------------------------
Var add(Tape& t, const Var& a, const Var& b);  // same shape
Var mul(Tape& t, const Var& a, const Var& b);  // same shape
Var scale(Tape& t, const Var& x, float alpha);
// Unit-scaling primitive: forward y = alpha x, backward dx += beta dy (alpha and
// beta independent, so forward and backward scales can be chosen separately).
Var scale_split(Tape& t, const Var& x, float alpha, float beta);
// y = x + b [C] broadcast over rows of x [N, C].
Var add_bias(Tape& t, const Var& x, const Var& b);
// GELU, the tanh approximation or the exact erf form (kernels::GeluForm).
using GeluForm = kernels::GeluForm;
Var gelu(Tape& t, const Var& x, GeluForm form = GeluForm::tanh);
// The same, x given up by the caller: its buffer may become the output.
Var gelu(Tape& t, Var&& x, GeluForm form = GeluForm::tanh);
// y = forward gelu(x); dx += gelu'(x) backward dy (unit scaling), both in the GELU pass.
Var scaled_gelu(Tape& t, Var&& x, float forward, float backward, GeluForm form = GeluForm::tanh);
Var relu(Tape& t, const Var& x);
// Inverted dropout with probability p, active when t.ctx().training; the mask
// comes from (ctx.seed, ctx.dropout_calls) and is recomputed in backward.
Var dropout(Tape& t, const Var& x, float p);

// ---- rows ------------------------------------------------------------------------------------
Var softmax(Tape& t, const Var& x);  // over the last dim
// x [..., C], weight and bias [C]; eps 1e-5 (GPT-2) unless given.
Var layer_norm(Tape& t, const Var& x, const Var& weight, const Var& bias, float eps = 1e-5f);
// forward x layer_norm(x); backward the input, weight and bias gradients x
// (input, weight, bias) (unit scaling); forward rides on the weight and bias,
// input on the weight the backward kernel reads: no extra pass.
Var scaled_layer_norm(Tape& t, const Var& x, const Var& weight, const Var& bias, float forward, float input,
                      float weight_scale, float bias_scale, float eps = 1e-5f);
// qkv [B, T, 3C] -> [B, T, C], causal, NH heads, scores / sqrt(C/NH).
Var causal_self_attention(Tape& t, const Var& qkv, int64_t heads);

// ---- embeddings ------------------------------------------------------------------------------
// out [..., C] = weight [V, C] rows picked by ids (i32, any shape); ids outside [0, V) throw.
Var embedding(Tape& t, const Tensor& ids, const Var& weight);
// GPT input: out [B, T, C] = wte[ids [B, T]] + wpe[t] (fused).
Var token_position_embedding(Tape& t, const Tensor& ids, const Var& wte, const Var& wpe);

// ---- losses: scalar [1] results, sum reduction ----------------------------------------------
struct LossStats {
  double sum = 0;     // fp64 sum of per-target losses
  int64_t count = 0;  // counted (non-ignored) targets
};
// logits [N, V] (any leading dims), targets i32 [N] with -1 (any negative) ignored.
// Result [1] = sum of -log softmax(logits)[target] over counted rows.
Var cross_entropy(Tape& t, const Var& logits, const Tensor& targets, LossStats* stats = nullptr);
// cross_entropy of (input_scale x logits) whose logit gradient carries grad_scale where
// the exact gradient would carry input_scale (unit scaling's separate forward and
// backward scales); (1, 1) is cross_entropy.
Var scaled_cross_entropy(Tape& t, const Var& logits, const Tensor& targets, float input_scale, float grad_scale,
                         LossStats* stats = nullptr);
// Result [1] = sum (pred - target)^2. Backward: dpred += pred_grad_scale 2 dL (pred - target),
// dtarget -= target_grad_scale 2 dL (pred - target) (unit scaling's backward scales; (1, 1):
// the exact gradient).
Var mse(Tape& t, const Var& pred, const Var& target, float pred_grad_scale = 1.0f, float target_grad_scale = 1.0f);

// ---- activation checkpointing ------------------------------------------------------------
// y = fn(x) computed without recording; only x is kept. The backward pass
// reruns fn on a fresh tape with the same context (policy, weight casts and
// dropout stream position, so masks replay) and backpropagates through it.
// Parameters used inside fn (via tape.param) receive their gradients as usual.
using Segment = std::function<Var(Tape&, const Var&)>;
Var checkpoint(Tape& t, const Var& x, const Segment& fn);

// ---- shapes ----------------------------------------------------------------------------------
Var reshape(Tape& t, const Var& x, const Shape& shape);  // shares storage
// Swap the last two dims: [..., M, N] -> [..., N, M] (a copy).
Var transpose(Tape& t, const Var& x);
// Split the last dim into pieces of the given sizes (copies).
std::vector<Var> split(Tape& t, const Var& x, const std::vector<int64_t>& sizes);
// Concatenate along the last dim (all other dims equal).
Var concat(Tape& t, const std::vector<Var>& xs);

}  // namespace mantissa::autograd
