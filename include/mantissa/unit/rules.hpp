// Unit scaling (Blake, Orr, Luschi, ICML 2023; u-muP, Blake et al. 2024):
// per-op forward scale alpha and backward scales beta_i chosen so that with
// unit-variance inputs the output and every input gradient have unit
// variance. This header is engine-independent: it only computes the numbers;
// the model code multiplies them into the kernels that already run (GEMM
// epilogue, elementwise pass). Every formula and its source is listed in
// docs/unit-scaling.md.
//
// Two rule sets:
//   paper   - the ICML 2023 compendium (its table of ops): GELU
//             scales 1.701 / 1.481, gmean constraint on non-cut edges,
//             readout treated as an ordinary linear layer.
//   library - Graphcore unit-scaling 0.3.5 (`unit_scaling.functional`):
//             to_output_scale by default, `mult`-interpolated GELU/SiLU/
//             softmax/attention, 1/fan_in readout without a constraint.
// Ops the paper's table does not list (softmax, attention, SiLU, MSE) use
// the library's formula in both rule sets; ReLU (not in the library) uses
// the paper's closed form in both.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mantissa::unit {

// How the scales of an op whose input is a non-cut edge (its forward and
// backward scale must agree so the op stays a scaled version of one function)
// are tied together. Same names and semantics as unit_scaling.constraints.
enum class Constraint {
  gmean,                // geometric mean of output and all grad-input scales
  hmean,                // harmonic mean (Xavier/Glorot)
  amean,                // arithmetic mean
  to_output_scale,      // every scale := output scale (library default)
  to_grad_input_scale,  // binary ops only: every scale := the grad-input scale
  to_left_grad_scale,   // ternary ops only (output, left, right): := left
  to_right_grad_scale,  // ternary ops only: := right
  none,                 // leave the scales independent (cut edges)
};

// "gmean", "to_output_scale", ... ; parse throws std::invalid_argument naming
// the bad value and every valid name.
Constraint parse_constraint(std::string_view name);
const char* constraint_name(Constraint c);
std::string constraint_names();  // "gmean, hmean, ..." for messages

enum class RuleSet { paper, library };
RuleSet parse_rule_set(std::string_view name);  // "paper" | "library"
const char* rule_set_name(RuleSet r);
// The constraint an op uses when the caller does not pick one:
// paper -> gmean, library -> to_output_scale.
Constraint default_constraint(RuleSet r);

// The forward (output) scale and one backward scale per input, in the order
// each function documents. Scaling means: output *= fwd in the forward pass,
// grad_input_i *= bwd[i] in the backward pass (multiplying the gradient the
// unscaled op produces for input i).
struct Scales {
  double fwd = 1.0;
  std::vector<double> bwd;
};

// Constraint applied to (output_scale, grad_input_scales...): every returned
// scale equals the chosen value, except for `none` which returns the inputs.
// Throws std::invalid_argument if the constraint needs a different arity
// (to_grad_input_scale: exactly one grad scale; to_left/right: exactly two)
// or a scale is not finite and positive.
Scales apply_constraint(Constraint c, double output_scale, std::span<const double> grad_input_scales);

// Which constraint an op applies: an explicit choice wins, else the rule
// set's default for that op.
struct Rules {
  RuleSet set = RuleSet::library;
  std::optional<Constraint> constraint;  // nullopt: the rule set's default
};

// ---- matrix products -------------------------------------------------------
// matmul: Y[b,n] = X[b,m] @ W[m,n] with both operands activations.
// Raw: fwd m^-1/2, bwd {X: n^-1/2, W: b^-1/2}; the constraint ties all three.
Scales matmul(int64_t b, int64_t m, int64_t n, const Rules& r = {});
// linear: Y[batch,fan_out] = X[batch,fan_in] @ W^T + bias, W[fan_out,fan_in].
// batch = numel(X) / fan_in. bwd = {X, W, bias}; the constraint ties only
// (fwd, X) since W and bias are cut edges. Raw fwd fan_in^-1/2,
// X fan_out^-1/2, W and bias batch^-1/2.
Scales linear(int64_t fan_in, int64_t fan_out, int64_t batch, const Rules& r = {});
// The final projection to logits. library: fwd 1/fan_in, X fan_out^-1/2,
// W/bias batch^-1/2, constraint none unless one is given. paper: = linear.
Scales linear_readout(int64_t fan_in, int64_t fan_out, int64_t batch, const Rules& r = {});
// embedding lookup of `tokens` ids into a [vocab, d] table: fwd 1,
// bwd {W: sqrt(vocab / tokens)}.
Scales embedding(int64_t vocab, int64_t tokens);

// ---- elementwise -----------------------------------------------------------
// All return bwd = {input}; the constraint ties (fwd, input).
// gelu(x) computed as gelu(mult*x)/mult. paper: 1.701 / 1.481 (mult ignored).
Scales gelu(double mult = 1.0, const Rules& r = {});
// E gelu(mult z)/mult for z ~ N(0,1), the erf form: mult / sqrt(2 pi (1 + mult^2))
// (Stein's lemma; 1/(2 sqrt(pi)) = 0.2821 at mult 1; the tanh form's is 0.2820).
double gelu_mean(double mult = 1.0);
Scales relu(const Rules& r = {});  // sqrt(2/(1-1/pi)), sqrt 2
// silu(x) computed as x * sigmoid(mult*x).
Scales silu(double mult = 1.0, const Rules& r = {});
// SwiGLU's product y = silu(gate) * up (gate computed as x sigmoid(mult x)),
// one op with two inputs: bwd = {gate, up}. Both inputs are non-cut edges
// reached from one tensor, so the two backward scales must be equal; the
// constraint ties all three. paper: the closed form for independent unit
// gate and up, fwd = up's grad = 1/sqrt(E silu(z)^2), gate's grad =
// 1/sqrt(E silu'(z)^2) (z ~ N(0,1), mult 1), gmean-tied. library:
// unit_scaling.functional.silu_glu, one scale interp(1/(1+1/mult^2), 2, sqrt 2).
Scales silu_glu(double mult = 1.0, const Rules& r = {});
// The two moments above, E silu(z)^2 and E silu'(z)^2 for z ~ N(0,1).
double silu_square_mean();
double silu_grad_square_mean();
// softmax(mult * x) over `dim_size` entries.
Scales softmax(int64_t dim_size, double mult = 1.0, const Rules& r = {});
// dropout(p) with the usual 1/(1-p) rescale of kept values: fwd = bwd =
// sqrt(1-p), never constrained (they are equal already).
Scales dropout(double p);

// ---- attention -------------------------------------------------------------
// softmax(mult * Q K^T / d_head [+ causal mask]) V, Q/K/V [.., seq_len, d_head].
// Note the logits are scaled by mult/d_head, not 1/sqrt(d_head) (u-muP).
// One scale s = sqrt(1-p_drop) / interp(...) for the output and for the
// gradients of Q, K and V: bwd = {Q, K, V}. causal adds the log(S) term.
// Unconstrained by construction. logit_scale() gives the mult/d_head factor.
Scales scaled_dot_product_attention(int64_t seq_len, int64_t d_head, bool causal, double mult = 1.0,
                                    double dropout_p = 0.0);
double attention_logit_scale(int64_t d_head, double mult = 1.0);

// ---- additions and residuals ----------------------------------------------
// a + b where a has numel_a elements and b numel_b, broadcast to numel_out.
// Raw fwd 2^-1/2 (1 if either operand is a scalar), bwd {a, b} =
// (numel_out/numel_x)^-1/2; the constraint ties all three.
Scales add(int64_t numel_a, int64_t numel_b, int64_t numel_out, const Rules& r = {});
// Residual block x -> x*skip + f(x)*branch, implemented as residual_split
// (backward-only scales on the two copies of x) followed by residual_add
// (forward-only scales). d = sqrt(1 + tau^2).
struct ResidualScales {
  double branch = 1.0;       // tau / d: residual_add fwd on f(x)
  double skip = 1.0;         // 1 / d:   residual_add fwd on x, residual_split bwd on the skip copy
  double branch_grad = 1.0;  // residual_split bwd on the branch copy: tau / d / branch_mismatch
};
// branch_mismatch: the product, along every path through the branch f, of
// each op's backward scale over its forward scale (equal on all paths, or
// the branch's gradients are not scaled gradients). The split divides it
// out, so every gradient outside the branch is the one the tied scales
// would give while the ops inside keep their unconstrained (unit) scales.
ResidualScales residual(double tau, double branch_mismatch = 1.0);
// What an op's scales put on the paths through its input i: bwd[i] / fwd.
double mismatch(const Scales& s, size_t input = 0);
// The library's automatic tau (unit_scaling.transforms.unit_scale):
// 0.01 for branches containing self-attention, 0.5 otherwise.
double auto_residual_tau(bool self_attention_branch);
// u-muP's depth-aware rule (unit_scaling.core.functional.
// transformer_residual_scaling_rule): tau for residual `index` (even:
// attention, odd: MLP) of `layers` residual branches in total (2 per block).
double transformer_residual_tau(int index, int layers, double residual_mult = 1.0, double attn_ratio = 1.0);

// ---- normalisation ---------------------------------------------------------
// layer_norm / rms_norm over the last `normalized_numel` entries of an input
// of `numel` entries: fwd 1, bwd {x: 1, weight: sqrt(normalized/numel),
// bias: same} (rms_norm has no bias: bwd {x, weight}).
Scales layer_norm(int64_t normalized_numel, int64_t numel);
Scales rms_norm(int64_t normalized_numel, int64_t numel);

// ---- losses ------------------------------------------------------------------
// cross_entropy over `vocab` classes and `rows` rows, logits multiplied by
// `mult`, reduced by sum: fwd = mult on the logits, bwd {logits:
// vocab/sqrt(vocab-1)}; then mean reduction is a forward-only 1/rows on the
// loss (mean_scale), so the logit gradient does not shrink with the batch.
struct LossScales {
  double input_fwd = 1.0;  // on the logits / input before the loss
  double mean_scale = 1.0;  // forward-only on the summed loss (1 for sum reduction)
  std::vector<double> bwd;  // cross_entropy: {logits}; mse: {input, target}
};
LossScales cross_entropy(int64_t vocab, int64_t rows, double mult = 1.0, bool mean_reduction = true);
// mse over numel elements, reduced by sum: bwd {input: 8^-1/2, target:
// 8^-1/2}, then mean is a forward-only 1/numel.
LossScales mse(int64_t numel, bool mean_reduction = true);

// exp(alpha*log(upper) + (1-alpha)*log(lower)): the library's interpolation
// between a small-mult and a large-mult limit.
double log_interpolate(double alpha, double lower, double upper);

// ---- optimizer learning-rate rules (u-muP, unit_scaling.optim) --------------
// weight: hidden matrices and embeddings; output: the readout weight;
// bias and norm: vectors.
enum class ParamRole { weight, bias, norm, output };
ParamRole parse_param_role(std::string_view name);
const char* param_role_name(ParamRole r);
enum class OptimizerKind { adam, sgd };  // adam covers AdamW
// The factor the base learning rate is multiplied by for one parameter.
// shape: the parameter's shape (fan_in = shape[0] for 1-D, shape[1] for 2-D,
// shape[1]*shape[2] for 3-D: an embedding's fan_in is its width).
// depth: residual depth the parameter sits in (nullopt: not in the trunk),
// contributing depth^-1/2.
// Adam: weight fan_in^-1/2, bias/norm/output 1. SGD: with no readout
// constraint the Adam rule (gradients are unit-scaled so updates are too);
// with readout constraint to_output_scale: bias/norm x shape[0], weight x
// fan_in^1/2, output x 1. Other readout constraints throw.
double lr_scale(OptimizerKind opt, ParamRole role, std::span<const int64_t> shape, std::optional<int> depth = {},
                std::optional<Constraint> sgd_readout_constraint = {});
// Independent weight decay: the decay the optimizer must be given so that
// the per-step decay (lr_param * wd_given) equals weight_decay regardless of
// the parameter's learning rate.
double independent_weight_decay(double weight_decay, double param_lr);

}  // namespace mantissa::unit
