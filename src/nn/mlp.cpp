#include "mantissa/nn/mlp.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mantissa/autograd/ops.hpp"
#include "mantissa/unit/ops.hpp"
#include "mantissa/kernels/matmul.hpp"
#include "mantissa/nn/init.hpp"
#include "mantissa/io/untrusted.hpp"
#include "nn/parametrisation.hpp"
#include "mantissa/tensor/checked.hpp"

namespace mantissa::nn {
namespace ag = mantissa::autograd;

void MLPConfig::validate() const {
  check_dimension("MLP", "inputs", inputs);
  check_dimension("MLP", "classes", classes);
  if (hidden.size() > 1024) throw std::invalid_argument("MLP config: more than 1024 hidden layers");
  for (size_t i = 0; i < hidden.size(); ++i)
    check_dimension("MLP", ("hidden[" + std::to_string(i) + "]").c_str(), hidden[i]);
  // Weights [in, out] and biases [out] of every layer.
  const char* what = "MLP config: parameter count";
  int64_t n = 0, in = inputs;
  for (size_t i = 0; i <= hidden.size(); ++i) {
    const int64_t out = i < hidden.size() ? hidden[i] : classes;
    n = checked_add(n, checked_mul(checked_add(in, 1, what), out, what), what);
    in = out;
  }
  check_parameter_total("MLP", n);
  if (activation != "relu" && activation != "gelu")
    throw std::invalid_argument("MLP config: activation must be relu or gelu, got '" + activation + "'");
  unit.validate();
}

std::string MLPConfig::to_json() const {
  nlohmann::ordered_json j;
  j["model_type"] = "mlp";
  j["inputs"] = inputs;
  j["hidden"] = hidden;
  j["classes"] = classes;
  j["activation"] = activation;
  j["seed"] = seed;
  write_parametrisation(j, unit);
  return j.dump(2);
}

MLPConfig MLPConfig::from_json(const std::string& text) {
  const nlohmann::json j = io::parse_json(text, "MLP config");
  MLPConfig c;
  try {
    c.inputs = j.at("inputs").get<int64_t>();
    c.hidden = j.at("hidden").get<std::vector<int64_t>>();
    c.classes = j.at("classes").get<int64_t>();
    c.activation = j.at("activation").get<std::string>();
    if (j.contains("seed")) c.seed = j["seed"].get<uint64_t>();
    read_parametrisation(j, c.unit, "MLP");
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("MLP config: ") + e.what());
  }
  c.validate();
  return c;
}

MLP::MLP(const MLPConfig& config) : config_(config) {
  config_.validate();
  Rng rng(config_.seed);
  int64_t in = config_.inputs;
  const size_t n = config_.hidden.size() + 1;
  for (size_t i = 0; i < n; ++i) {
    const bool last = i + 1 == n;
    const int64_t out = last ? config_.classes : config_.hidden[i];
    const std::string prefix = "layers." + std::to_string(i) + ".";
    autograd::Parameter* w = add_parameter(prefix + "weight", {in, out}, last ? autograd::Role::readout : autograd::Role::weight, in);
    // Unit scaling: N(0, 1) weights, the op scales do the rest.
    init_normal(w->value, rng,
                config_.unit.enabled ? 1.0 : (last ? 1.0 : std::sqrt(2.0)) / std::sqrt(static_cast<double>(in)));
    w->bias = add_parameter(prefix + "bias", {out}, autograd::Role::bias, 1);
    in = out;
  }
}

// x [B, inputs] -> h_i [B, hidden_i] -> logits [B, classes].
// Unit: linear scales in the GEMM alpha (the last layer is the readout),
// the activation's scales in its own pass. Outputs are observed as
// "layers.<i>.linear" / "layers.<i>.act" for the scale analysis.
ag::Var MLP::forward(ag::Tape& t, const ag::Var& x) {
  const unit::UnitConfig& u = config_.unit;
  ag::Var h = x;
  const size_t layers = params_.size() / 2;
  for (size_t i = 0; i < layers; ++i) {
    const bool last = i + 1 == layers;
    ag::Var b = t.param(*params_[2 * i + 1]);
    ag::Var w = t.param(*params_[2 * i]);
    ag::OpScales s;
    if (u.enabled) {
      const int64_t fi = w.dim(0), fo = w.dim(1), batch = h.numel() / fi;
      s = unit::op_scales(last ? unit::linear_readout(fi, fo, batch, u.rules("readout")) : unit::linear(fi, fo, batch, u.rules("linear")));
    }
    std::string name("layers.");  // (not "layers." + ...: GCC 12 -Wrestrict false positive)
    name += std::to_string(i);
    if (last) {
      const ag::ReadoutScope readout(t);
      h = unit::observe(t, ag::linear(t, h, w, &b, s), name + ".linear");
      break;
    }
    h = unit::observe(t, ag::linear(t, h, w, &b, s), name + ".linear");
    const bool gelu = config_.activation == "gelu";
    if (u.enabled)
      h = gelu ? unit::unit_gelu(t, h, unit::gelu(1.0, u.rules("gelu"))) : unit::unit_relu(t, h, unit::relu(u.rules("relu")));
    else
      h = gelu ? ag::gelu(t, h) : ag::relu(t, h);
    h = unit::observe(t, h, name + ".act");
  }
  return h;
}

ag::Var MLP::loss(ag::Tape& t, const ag::Var& logits, const Tensor& targets, ag::LossStats* stats) {
  if (!config_.unit.enabled) return ag::cross_entropy(t, logits, targets, stats);
  const int64_t V = config_.classes, rows = logits.numel() / V;
  return unit::unit_cross_entropy(t, logits, targets, unit::cross_entropy(V, rows, config_.unit.loss_mult), stats);
}

void MLP::check_batch(const Batch& batch) const {
  const Tensor& in = batch.inputs;
  if (!in.defined() || in.dtype() != DType::f32 || in.ndim() != 2 || in.dim(1) != config_.inputs)
    throw std::invalid_argument("MLP: inputs must be f32 [B, " + std::to_string(config_.inputs) + "]");
  if (!batch.targets.defined() || batch.targets.dtype() != DType::i32 || batch.targets.numel() != in.dim(0))
    throw std::invalid_argument("MLP: targets must be i32 [" + std::to_string(in.dim(0)) + "]");
}

LossSum MLP::forward_backward(const Batch& batch, float grad_scale) {
  check_batch(batch);
  ag::Tape t(context(true));
  ag::LossStats stats;
  ag::Var l = loss(t, forward(t, t.constant(batch.inputs)), batch.targets, &stats);
  // Unit: the logit gradient is unit per row; count/total is this micro-batch's share.
  t.backward(l, config_.unit.enabled ? grad_scale * static_cast<float>(stats.count) : grad_scale);
  return {stats.sum, stats.count};
}

LossSum MLP::evaluate(const Batch& batch) {
  check_batch(batch);
  ag::NoGrad no_grad;
  ag::Tape t(context(false));
  ag::LossStats stats;
  loss(t, forward(t, t.constant(batch.inputs)), batch.targets, &stats);
  return {stats.sum, stats.count};
}

Tensor MLP::logits(const Tensor& x) {
  ag::NoGrad no_grad;
  ag::Tape t(context(false));
  return forward(t, t.constant(x)).value;
}

}  // namespace mantissa::nn
