#include "mantissa/unit/rules.hpp"

#include <array>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace mantissa::unit {
namespace {

constexpr std::array<std::pair<Constraint, const char*>, 8> kConstraintNames{{
    {Constraint::gmean, "gmean"},
    {Constraint::hmean, "hmean"},
    {Constraint::amean, "amean"},
    {Constraint::to_output_scale, "to_output_scale"},
    {Constraint::to_grad_input_scale, "to_grad_input_scale"},
    {Constraint::to_left_grad_scale, "to_left_grad_scale"},
    {Constraint::to_right_grad_scale, "to_right_grad_scale"},
    {Constraint::none, "none"},
}};

void require_positive(int64_t v, const char* what) {
  if (v <= 0) throw std::invalid_argument(std::string("unit scaling: ") + what + " must be positive, got " + std::to_string(v));
}

void require_finite_positive(double v, const char* what) {
  if (!(std::isfinite(v) && v > 0))
    throw std::invalid_argument(std::string("unit scaling: ") + what + " must be finite and positive, got " +
                                std::to_string(v));
}

Constraint pick(const Rules& r, Constraint library_default) {
  if (r.constraint) return *r.constraint;
  return r.set == RuleSet::paper ? Constraint::gmean : library_default;
}

double to_double(int64_t v) { return static_cast<double>(v); }

// sqrt(2 / (1 - 1/pi)): 1/std of relu(x), x ~ N(0,1).
const double kReluFwd = std::sqrt(2.0 / (1.0 - 1.0 / std::numbers::pi));

Scales constrain_unary(const Rules& r, Constraint library_default, double out, double grad) {
  const std::array<double, 1> g{grad};
  return apply_constraint(pick(r, library_default), out, g);
}

}  // namespace

Constraint parse_constraint(std::string_view name) {
  for (const auto& [c, n] : kConstraintNames)
    if (name == n) return c;
  throw std::invalid_argument("unknown scale constraint '" + std::string(name) + "' (valid: " + constraint_names() + ")");
}

const char* constraint_name(Constraint c) {
  for (const auto& [k, n] : kConstraintNames)
    if (k == c) return n;
  return "?";
}

std::string constraint_names() {
  std::string s;
  for (const auto& [c, n] : kConstraintNames) {
    if (!s.empty()) s += ", ";
    s += n;
  }
  return s;
}

RuleSet parse_rule_set(std::string_view name) {
  if (name == "paper") return RuleSet::paper;
  if (name == "library") return RuleSet::library;
  throw std::invalid_argument("unknown unit-scaling rule set '" + std::string(name) + "' (valid: paper, library)");
}

const char* rule_set_name(RuleSet r) { return r == RuleSet::paper ? "paper" : "library"; }

Constraint default_constraint(RuleSet r) { return r == RuleSet::paper ? Constraint::gmean : Constraint::to_output_scale; }

Scales apply_constraint(Constraint c, double output_scale, std::span<const double> grads) {
  require_finite_positive(output_scale, "output scale");
  for (double g : grads) require_finite_positive(g, "grad-input scale");
  Scales s{output_scale, {grads.begin(), grads.end()}};
  const double count = static_cast<double>(grads.size() + 1);
  double chosen = output_scale;
  switch (c) {
    case Constraint::none:
      return s;
    case Constraint::gmean: {
      // Mean of logs: the product of many small scales cannot underflow.
      double log_sum = std::log(output_scale);
      for (double g : grads) log_sum += std::log(g);
      chosen = std::exp(log_sum / count);
      break;
    }
    case Constraint::hmean: {
      double inv = 1.0 / output_scale;
      for (double g : grads) inv += 1.0 / g;
      chosen = count / inv;
      break;
    }
    case Constraint::amean: {
      double sum = output_scale;
      for (double g : grads) sum += g;
      chosen = sum / count;
      break;
    }
    case Constraint::to_output_scale:
      chosen = output_scale;
      break;
    case Constraint::to_grad_input_scale:
      if (grads.size() != 1)
        throw std::invalid_argument("constraint to_grad_input_scale needs an op with exactly one input, got " +
                                    std::to_string(grads.size()));
      chosen = grads[0];
      break;
    case Constraint::to_left_grad_scale:
    case Constraint::to_right_grad_scale:
      if (grads.size() != 2)
        throw std::invalid_argument(std::string("constraint ") + constraint_name(c) +
                                    " needs an op with exactly two inputs, got " + std::to_string(grads.size()));
      chosen = c == Constraint::to_left_grad_scale ? grads[0] : grads[1];
      break;
  }
  s.fwd = chosen;
  for (double& g : s.bwd) g = chosen;
  return s;
}

double log_interpolate(double alpha, double lower, double upper) {
  require_finite_positive(lower, "interpolation lower limit");
  require_finite_positive(upper, "interpolation upper limit");
  return std::exp(alpha * std::log(upper) + (1.0 - alpha) * std::log(lower));
}

Scales matmul(int64_t b, int64_t m, int64_t n, const Rules& r) {
  require_positive(b, "matmul rows b");
  require_positive(m, "matmul inner size m");
  require_positive(n, "matmul columns n");
  const std::array<double, 2> g{1.0 / std::sqrt(to_double(n)), 1.0 / std::sqrt(to_double(b))};
  return apply_constraint(pick(r, Constraint::to_output_scale), 1.0 / std::sqrt(to_double(m)), g);
}

namespace {
Scales linear_with_power(int64_t fan_in, int64_t fan_out, int64_t batch, double out_power, Constraint c) {
  require_positive(fan_in, "linear fan_in");
  require_positive(fan_out, "linear fan_out");
  require_positive(batch, "linear batch");
  const double weight = std::pow(to_double(batch), -0.5);
  const std::array<double, 1> g{std::pow(to_double(fan_out), -0.5)};
  // Only (output, grad input) are tied: weight and bias are cut edges.
  Scales tied = apply_constraint(c, std::pow(to_double(fan_in), -out_power), g);
  return {tied.fwd, {tied.bwd[0], weight, weight}};
}
}  // namespace

Scales linear(int64_t fan_in, int64_t fan_out, int64_t batch, const Rules& r) {
  return linear_with_power(fan_in, fan_out, batch, 0.5, pick(r, Constraint::to_output_scale));
}

Scales linear_readout(int64_t fan_in, int64_t fan_out, int64_t batch, const Rules& r) {
  if (r.set == RuleSet::paper) return linear(fan_in, fan_out, batch, r);
  // The library's readout is unconstrained by default: its 1/fan_in forward
  // (muP's readout multiplier) must not leak into the input gradient.
  return linear_with_power(fan_in, fan_out, batch, 1.0, r.constraint.value_or(Constraint::none));
}

Scales embedding(int64_t vocab, int64_t tokens) {
  require_positive(vocab, "embedding vocab");
  require_positive(tokens, "embedding token count");
  return {1.0, {std::sqrt(to_double(vocab) / to_double(tokens))}};
}

Scales gelu(double mult, const Rules& r) {
  require_finite_positive(mult, "gelu mult");
  if (r.set == RuleSet::paper) return constrain_unary(r, Constraint::to_output_scale, 1.701, 1.481);
  // sigmoid(log(4 mult^2)): mult -> 0 makes gelu linear-ish around 0 (x/2:
  // scale 2), mult -> inf makes it relu.
  const double a = 1.0 / (1.0 + 0.25 / (mult * mult));
  return constrain_unary(r, Constraint::to_output_scale, log_interpolate(a, 2.0, kReluFwd),
                         log_interpolate(a, 2.0, std::sqrt(2.0)));
}

double gelu_mean(double mult) {
  require_finite_positive(mult, "gelu mult");
  return mult / std::sqrt(2.0 * std::numbers::pi * (1.0 + mult * mult));
}

Scales relu(const Rules& r) { return constrain_unary(r, Constraint::to_output_scale, kReluFwd, std::sqrt(2.0)); }

Scales silu(double mult, const Rules& r) {
  require_finite_positive(mult, "silu mult");
  const double a_out = 1.0 / (1.0 + 0.25 / (mult * mult));
  const double a_grad = 1.0 / (1.0 + 1.0 / (mult * mult));
  return constrain_unary(r, Constraint::to_output_scale, log_interpolate(a_out, 2.0, kReluFwd),
                         log_interpolate(a_grad, 2.0, std::sqrt(2.0)));
}

// E silu(z)^2 and E silu'(z)^2, z ~ N(0,1), silu(z) = z sigmoid(z): Gauss-Hermite
// quadrature in float64 (derivation in docs/unit-scaling.md; the tests recompute them).
double silu_square_mean() { return 0.35577551981735184; }
double silu_grad_square_mean() { return 0.37948235163282923; }

Scales silu_glu(double mult, const Rules& r) {
  require_finite_positive(mult, "silu_glu mult");
  if (r.set == RuleSet::paper) {
    // Independent unit gate g and up u: Var(silu(g) u) = E silu(g)^2 = Var(d up);
    // Var(d gate) = E silu'(g)^2 E u^2. The paper's rules are for mult 1.
    const double out = 1.0 / std::sqrt(silu_square_mean()), gate = 1.0 / std::sqrt(silu_grad_square_mean());
    const std::array<double, 2> g{gate, out};
    return apply_constraint(pick(r, Constraint::gmean), out, g);
  }
  const double s = log_interpolate(1.0 / (1.0 + 1.0 / (mult * mult)), 2.0, std::sqrt(2.0));
  const std::array<double, 2> g{s, s};
  return apply_constraint(r.constraint.value_or(Constraint::to_output_scale), s, g);
}

Scales softmax(int64_t dim_size, double mult, const Rules& r) {
  require_positive(dim_size, "softmax size");
  require_finite_positive(mult, "softmax mult");
  const double s = to_double(dim_size);
  // Limits: a flat softmax (output 1/s everywhere) and a one-hot one.
  const double a = 1.0 / (1.0 + 4.0 / (mult * mult));
  return constrain_unary(r, Constraint::to_output_scale, log_interpolate(a, s, std::sqrt(s)),
                         log_interpolate(a, s / mult, std::sqrt(s / mult)));
}

Scales dropout(double p) {
  if (!(p >= 0.0 && p < 1.0)) throw std::invalid_argument("dropout probability must be in [0, 1), got " + std::to_string(p));
  const double s = std::sqrt(1.0 - p);
  return {s, {s}};
}

double attention_logit_scale(int64_t d_head, double mult) {
  require_positive(d_head, "attention head size");
  return mult / to_double(d_head);
}

Scales scaled_dot_product_attention(int64_t seq_len, int64_t d_head, bool causal, double mult, double dropout_p) {
  require_positive(seq_len, "attention sequence length");
  require_positive(d_head, "attention head size");
  require_finite_positive(mult, "attention mult");
  if (!(dropout_p >= 0.0 && dropout_p < 1.0))
    throw std::invalid_argument("attention dropout must be in [0, 1), got " + std::to_string(dropout_p));
  const double s = to_double(seq_len);
  // Small logits make attention an average: over all S keys (variance 1/S),
  // or causally over i+1 keys (mean variance ~ log(S)/S). log(1) = 0 would
  // make the limit 0, so a length-1 sequence (a copy) keeps scale 1.
  const double flat_var = causal ? (seq_len > 1 ? std::log(s) / s : 1.0) : 1.0 / s;
  const double a = 1.0 / (1.0 + 4.0 * to_double(d_head) / (mult * mult));
  const double scale = std::sqrt(1.0 - dropout_p) / log_interpolate(a, std::sqrt(flat_var), 1.0);
  return {scale, {scale, scale, scale}};
}

Scales add(int64_t numel_a, int64_t numel_b, int64_t numel_out, const Rules& r) {
  require_positive(numel_a, "add operand a size");
  require_positive(numel_b, "add operand b size");
  if (numel_out % numel_a != 0 || numel_out % numel_b != 0)
    throw std::invalid_argument("add: output size " + std::to_string(numel_out) + " is not a broadcast of " +
                                std::to_string(numel_a) + " and " + std::to_string(numel_b));
  const bool scalar = numel_a == 1 || numel_b == 1;
  const std::array<double, 2> g{std::pow(to_double(numel_out / numel_a), -0.5),
                                std::pow(to_double(numel_out / numel_b), -0.5)};
  return apply_constraint(pick(r, Constraint::to_output_scale), scalar ? 1.0 : std::sqrt(0.5), g);
}

ResidualScales residual(double tau, double branch_mismatch) {
  if (!(std::isfinite(tau) && tau >= 0)) throw std::invalid_argument("residual tau must be finite and >= 0, got " + std::to_string(tau));
  require_finite_positive(branch_mismatch, "residual branch mismatch");
  const double d = std::sqrt(1.0 + tau * tau);
  return {tau / d, 1.0 / d, tau / d / branch_mismatch};
}

double mismatch(const Scales& s, size_t input) {
  if (input >= s.bwd.size())
    throw std::invalid_argument("mismatch: input " + std::to_string(input) + " of an op with " + std::to_string(s.bwd.size()) +
                                " inputs");
  return s.bwd[input] / s.fwd;
}

double auto_residual_tau(bool self_attention_branch) { return self_attention_branch ? 0.01 : 0.5; }

double transformer_residual_tau(int index, int layers, double residual_mult, double attn_ratio) {
  if (layers <= 0 || index < 0 || index >= layers)
    throw std::invalid_argument("residual index " + std::to_string(index) + " out of range for " + std::to_string(layers) +
                                " residual layers");
  const double alpha_mlp = residual_mult * std::sqrt(2.0 / (1.0 + attn_ratio * attn_ratio));
  const double alpha_attn = attn_ratio * alpha_mlp;
  const int n_attn = (index + 1) / 2, n_mlp = index / 2;
  const double alpha = index % 2 == 0 ? alpha_attn : alpha_mlp;
  return alpha / std::sqrt(layers / 2.0 + n_attn * alpha_attn * alpha_attn + n_mlp * alpha_mlp * alpha_mlp);
}

namespace {
double norm_weight_scale(int64_t normalized, int64_t numel) {
  require_positive(normalized, "normalized size");
  require_positive(numel, "norm input size");
  if (numel % normalized != 0)
    throw std::invalid_argument("norm input size " + std::to_string(numel) + " is not a multiple of the normalized size " +
                                std::to_string(normalized));
  return std::sqrt(to_double(normalized) / to_double(numel));
}
}  // namespace

Scales layer_norm(int64_t normalized_numel, int64_t numel) {
  const double w = norm_weight_scale(normalized_numel, numel);
  return {1.0, {1.0, w, w}};
}

Scales rms_norm(int64_t normalized_numel, int64_t numel) {
  return {1.0, {1.0, norm_weight_scale(normalized_numel, numel)}};
}

LossScales cross_entropy(int64_t vocab, int64_t rows, double mult, bool mean_reduction) {
  if (vocab < 2) throw std::invalid_argument("cross_entropy needs at least 2 classes, got " + std::to_string(vocab));
  require_positive(rows, "cross_entropy rows");
  require_finite_positive(mult, "cross_entropy mult");
  const double v = to_double(vocab);
  return {mult, mean_reduction ? 1.0 / to_double(rows) : 1.0, {v / std::sqrt(v - 1.0)}};
}

LossScales mse(int64_t numel, bool mean_reduction) {
  require_positive(numel, "mse size");
  // grad = 2 (x - t): variance 4 * 2 for independent unit x, t.
  const double g = 1.0 / std::sqrt(8.0);
  return {1.0, mean_reduction ? 1.0 / to_double(numel) : 1.0, {g, g}};
}

ParamRole parse_param_role(std::string_view name) {
  if (name == "weight") return ParamRole::weight;
  if (name == "bias") return ParamRole::bias;
  if (name == "norm") return ParamRole::norm;
  if (name == "output") return ParamRole::output;
  throw std::invalid_argument("unknown parameter role '" + std::string(name) + "' (valid: weight, bias, norm, output)");
}

const char* param_role_name(ParamRole r) {
  switch (r) {
    case ParamRole::weight: return "weight";
    case ParamRole::bias: return "bias";
    case ParamRole::norm: return "norm";
    case ParamRole::output: return "output";
  }
  return "?";
}

double lr_scale(OptimizerKind opt, ParamRole role, std::span<const int64_t> shape, std::optional<int> depth,
                std::optional<Constraint> sgd_readout_constraint) {
  if (shape.empty() || shape.size() > 3)
    throw std::invalid_argument("lr_scale: parameter must have 1 to 3 dimensions, got " + std::to_string(shape.size()));
  for (int64_t s : shape) require_positive(s, "parameter dimension");
  if (depth && *depth <= 0) throw std::invalid_argument("lr_scale: depth must be positive, got " + std::to_string(*depth));
  const double depth_scale = depth ? 1.0 / std::sqrt(static_cast<double>(*depth)) : 1.0;
  const double fan_in = shape.size() == 1   ? to_double(shape[0])
                        : shape.size() == 2 ? to_double(shape[1])
                                            : to_double(shape[1]) * to_double(shape[2]);
  bool adam_rule = opt == OptimizerKind::adam;
  if (opt == OptimizerKind::sgd) {
    const Constraint c = sgd_readout_constraint.value_or(Constraint::none);
    if (c == Constraint::none) adam_rule = true;  // unit gradients give unit updates, as Adam's
    else if (c != Constraint::to_output_scale)
      throw std::invalid_argument(std::string("lr_scale: SGD rule undefined for readout constraint ") + constraint_name(c) +
                                  " (valid: none, to_output_scale)");
  }
  switch (role) {
    case ParamRole::bias:
    case ParamRole::norm:
      return adam_rule ? depth_scale : depth_scale * to_double(shape[0]);
    case ParamRole::weight:
      return adam_rule ? depth_scale / std::sqrt(fan_in) : depth_scale * std::sqrt(fan_in);
    case ParamRole::output:
      return depth_scale;
  }
  return depth_scale;
}

double independent_weight_decay(double weight_decay, double param_lr) {
  require_finite_positive(param_lr, "parameter learning rate");
  return weight_decay / param_lr;
}

}  // namespace mantissa::unit
