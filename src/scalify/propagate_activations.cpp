// Derived scale-propagation rules for the activations: GELU (GPT, BERT),
// SiLU and the SwiGLU product (Llama), forward and backward
// (docs/scale-propagation.md). Values are computed in fp64 from data x scale.
#include <cmath>
#include <utility>
#include <vector>

#include "mantissa/scalify/propagate.hpp"
#include "scalify/propagate_detail.hpp"

namespace mantissa::scalify {

using namespace detail;  // propagate_detail.hpp

namespace {

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2/pi)

double gelu_value(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + 0.044715 * x * x * x))); }
double gelu_grad(double x) {
  const double u = kGeluC * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * 0.044715 * x * x);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu_value(double x) { return x * sigmoid(x); }
double silu_grad(double x) {
  const double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

}  // namespace

ScaledTensor gelu(const ScaledTensor& x) {
  need_tensor_scale(x, "gelu");
  const double s = x.scale();
  auto d = data_of(x);
  for (float& v : d) v = static_cast<float>(gelu_value(v * s) / s);
  return make(std::move(d), x.shape(), static_cast<float>(scale_rule::gelu(x.scale())));
}

ScaledTensor gelu_backward(const ScaledTensor& x, const ScaledTensor& dy) {
  need_tensor_scale(x, "gelu_backward");
  need_tensor_scale(dy, "gelu_backward");
  need_shape(x.shape() == dy.shape(), "gelu_backward", "needs x and dy of one shape");
  const auto vx = x.values();
  auto d = data_of(dy);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<float>(d[i] * gelu_grad(vx[i]));
  return make(std::move(d), dy.shape(), static_cast<float>(scale_rule::gelu_backward(dy.scale())));
}

ScaledTensor silu(const ScaledTensor& x) {
  need_tensor_scale(x, "silu");
  const double s = x.scale();
  auto d = data_of(x);
  for (float& v : d) v = static_cast<float>(silu_value(v * s) / s);
  return make(std::move(d), x.shape(), static_cast<float>(scale_rule::silu(s)));
}

ScaledTensor silu_backward(const ScaledTensor& x, const ScaledTensor& dy) {
  need_tensor_scale(x, "silu_backward");
  need_tensor_scale(dy, "silu_backward");
  need_shape(x.shape() == dy.shape(), "silu_backward", "needs x and dy of one shape");
  const auto vx = x.values_f64();
  auto d = data_of(dy);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<float>(d[i] * silu_grad(vx[i]));
  return make(std::move(d), dy.shape(), static_cast<float>(scale_rule::silu_backward(dy.scale())));
}

ScaledTensor swiglu(const ScaledTensor& gate, const ScaledTensor& up) {
  need_tensor_scale(gate, "swiglu");
  need_tensor_scale(up, "swiglu");
  need_shape(gate.shape() == up.shape(), "swiglu", "needs gate and up of one shape");
  const double sg = gate.scale();
  const auto dg = data_of(gate), du = data_of(up);
  std::vector<float> out(dg.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(silu_value(dg[i] * sg) / sg * du[i]);
  return make(std::move(out), gate.shape(), scale_in_range(scale_rule::swiglu(sg, up.scale()), "swiglu"));
}

std::pair<ScaledTensor, ScaledTensor> swiglu_backward(const ScaledTensor& gate, const ScaledTensor& up,
                                                      const ScaledTensor& dy) {
  for (const auto* t : {&gate, &up, &dy}) need_tensor_scale(*t, "swiglu_backward");
  need_shape(gate.shape() == up.shape() && dy.shape() == up.shape(), "swiglu_backward", "needs gate, up and dy of one shape");
  const double sg = gate.scale();
  const auto dg = data_of(gate), du = data_of(up), dd = data_of(dy);
  std::vector<float> d_gate(dg.size()), d_up(dg.size());
  for (size_t i = 0; i < dg.size(); ++i) {
    const double g = dg[i] * sg;
    d_gate[i] = static_cast<float>(static_cast<double>(dd[i]) * du[i] * silu_grad(g));  // x dy.s up.s
    d_up[i] = static_cast<float>(static_cast<double>(dd[i]) * silu_value(g) / sg);      // x dy.s gate.s
  }
  const double sd = dy.scale();
  return {make(std::move(d_gate), gate.shape(), scale_in_range(scale_rule::swiglu_backward_gate(sd, up.scale()), "swiglu_backward")),
          make(std::move(d_up), up.shape(), scale_in_range(scale_rule::swiglu_backward_up(sd, sg), "swiglu_backward"))};
}

}  // namespace mantissa::scalify
