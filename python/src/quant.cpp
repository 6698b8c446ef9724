// mantissa._core: the engine's operand quantisers on float32 arrays, built
// from a recipe by amp::precision_policy exactly as a training run builds
// them, so that mantissa.torch casts as the engine does by construction.
//
//   Fp8Quantiser(recipe, role)  one operand role of one product: an
//       Fp8Quantiser with that role's site (delayed scaling's amax history,
//       current scaling's last exponent); cast() casts an array viewed as
//       [rows, last axis] with the contraction (MX / blockwise blocks) along
//       the last axis. Weights go through quantise_weight, as the engine's.
//   Fp4Quantiser(recipe)        one per model (its stochastic draws count
//       casts across layers, as the engine's do); layer() gives an Fp4Layer
//       holding one linear layer's weight, whose casts are the three
//       products' of y = x W^T (x [M, in], W [out, in]).
//
// Weights are copied into an autograd::Parameter whose version moves when
// their bytes change: the quantisers cache a weight's cast by that version.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "mantissa/amp/amp.hpp"
#include "mantissa/autograd/parameter.hpp"
#include "mantissa/quant/fp4.hpp"
#include "mantissa/quant/fp8.hpp"
#include "mantissa/tensor/derived_cache.hpp"

namespace mantissa::py {
namespace {

using autograd::OperandRole;
using autograd::Parameter;
using autograd::QuantisedOperand;
using autograd::QuantSite;

// x viewed as [rows, cols]: cols its last axis (a 0-d array is [1, 1]).
std::pair<int64_t, int64_t> matrix_view(const In& x) {
  const auto cols = static_cast<int64_t>(x.ndim() == 0 ? 1 : x.shape(x.ndim() - 1));
  return {cols == 0 ? 0 : static_cast<int64_t>(x.size()) / cols, cols};
}

void require_2d(const In& x, const char* name) {
  if (x.ndim() != 2) throw nb::value_error((std::string(name) + ": expected a 2-D [rows, cols] array").c_str());
}

Tensor f32_tensor(const float* x, int64_t rows, int64_t cols) {
  Tensor t = Tensor::empty({rows, cols}, DType::f32, MemoryKind::workspace);
  std::memcpy(t.f32(), x, static_cast<size_t>(rows * cols) * sizeof(float));
  return t;
}

// out[i] = decoded value x scale: the values the engine's GEMM multiplies
// (the decode, bf16 or f32, times the per-tensor scale its alpha applies).
void write_values(const Tensor& decoded, float scale, float* out) {
  const int64_t n = decoded.numel();
  if (decoded.dtype() == DType::f32) {
    for (int64_t i = 0; i < n; ++i) out[i] = decoded.f32()[i] * scale;
    return;
  }
  if (decoded.dtype() != DType::bf16) throw std::logic_error("quantiser decode: expected bf16 or f32");
  const auto* b = decoded.data<uint16_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(b[i]) << 16;
    float v;
    std::memcpy(&v, &bits, sizeof v);
    out[i] = v * scale;
  }
}

nb::object values_array(const Tensor& decoded, float scale, const std::vector<size_t>& shape) {
  auto a = new_array<float>(shape);
  write_values(decoded, scale, a.data());
  return nb::cast(a);
}

// A weight handed in from Python as the Parameter the quantisers cast.
class HeldWeight {
 public:
  explicit HeldWeight(autograd::Role role) : p_(std::make_unique<Parameter>()) {
    p_->name = "weight";
    p_->role = role;
  }
  ~HeldWeight() { derived_cache().forget_source(p_.get()); }
  HeldWeight(const HeldWeight&) = delete;
  HeldWeight& operator=(const HeldWeight&) = delete;

  const Parameter& param() const { return *p_; }
  // The Parameter holding w [rows, cols]; its version moves when the values change.
  const Parameter& hold(const float* w, int64_t rows, int64_t cols) {
    Tensor& v = p_->value;
    const size_t bytes = static_cast<size_t>(rows * cols) * sizeof(float);
    if (!v.defined() || v.dim(0) != rows || v.dim(1) != cols) {
      v = Tensor::empty({rows, cols}, DType::f32, MemoryKind::parameter);
    } else if (std::memcmp(v.f32(), w, bytes) == 0) {
      return *p_;
    }
    std::memcpy(v.f32(), w, bytes);
    ++p_->version;
    return *p_;
  }

 private:
  std::unique_ptr<Parameter> p_;
};

// One FP8 cast: the values (code x every scale, fp32), the 1-byte codes,
// the per-tensor exponent E (value = decode(code) x 2^E; 0 for block
// scalings) and the block exponents [ceil(rows / tile rows), ceil(cols / tile cols)]
// (None for per-tensor scalings).
struct Fp8Cast {
  nb::object values, codes, block_exponents = nb::none();
  int exponent = 0;
};

class Fp8Operand {
 public:
  Fp8Operand(const recipe::Recipe& r, OperandRole role, int64_t block) {
    auto q = std::dynamic_pointer_cast<quant::Fp8Quantiser>(amp::precision_policy(r).quantiser);
    if (!q) throw nb::value_error(("recipe '" + r.name + "': its products are not cast by the FP8 quantiser").c_str());
    const bool grad = role == OperandRole::grad_output;
    if (grad ? !q->casts_backward() : !q->casts_forward())
      throw nb::value_error(("recipe '" + r.name + "': " + (grad ? "cast_backward" : "cast_forward") +
                             " is none: this operand is not cast")
                                .c_str());
    if (block != q->config().mx_block) {
      quant::Fp8Config c = q->config();
      c.mx_block = block;
      q = std::make_shared<quant::Fp8Quantiser>(c);
    }
    q_ = std::move(q);
    site_.role = role;
    if (role == OperandRole::weight) {
      weight_ = std::make_unique<HeldWeight>(autograd::Role::weight);
      site_.key = &weight_->param();
    }
  }

  Fp8Cast cast(const In& x, nb::object out_array, bool record) {
    const float* in = f32_input(x);
    if (weight_) require_2d(x, "x");
    const auto [rows, cols] = matrix_view(x);
    const std::vector<size_t> shape = shape_of(x);
    std::optional<Out> out;
    if (!out_array.is_none()) out = nb::cast<Out>(out_array);
    float* values = nullptr;
    Fp8Cast r;
    r.values = output<float>(out, shape, &values, {bytes_of(x, "x")}, "out", true);
    if (out) r.values = out_array;
    auto codes = new_array<uint8_t>(shape);
    r.codes = nb::cast(codes);
    if (x.size() == 0) return r;
    QuantSite site = site_;
    site.record = record;
    QuantisedOperand q;
    Tensor decoded;
    {
      KernelScope release(x.size());
      std::lock_guard lock(mutex_);
      if (weight_) {
        quant::Fp8Quantiser::Weight w = q_->quantise_weight(weight_->hold(in, rows, cols), 2, site);
        q = std::move(w.operand);
        decoded = std::move(w.decoded);
      } else {
        q = q_->quantise(f32_tensor(in, rows, cols), 1, rows, cols, 2, site, &decoded);
      }
      write_values(decoded, q.codes.scale(), values);
      std::memcpy(codes.data(), q.codes.raw(), x.size());
    }
    r.exponent = std::ilogb(q.codes.scale());
    if (q.blocks) {
      auto e = new_array<int8_t>(
          {static_cast<size_t>(q.blocks->tiles_down()), static_cast<size_t>(q.blocks->tiles_across())});
      std::memcpy(e.data(), q.blocks->exponents.data(), q.blocks->exponents.size());
      r.block_exponents = nb::cast(e);
    }
    return r;
  }

  std::string format() const {
    return (site_.role == OperandRole::grad_output ? q_->config().backward_format : q_->config().forward_format)->name;
  }
  quant::CastScaling scaling() const { return q_->config().scaling; }
  std::vector<float> history() const { return q_->site_state(site_).history; }
  std::optional<int> next_exponent() const {
    const quant::Fp8Quantiser::SiteState s = q_->site_state(site_);
    return s.has_exponent ? std::optional<int>(s.exponent) : std::nullopt;
  }
  void end_step() { q_->end_step(); }

 private:
  std::shared_ptr<quant::Fp8Quantiser> q_;
  QuantSite site_;
  std::unique_ptr<HeldWeight> weight_;
  std::mutex mutex_;  // one cast at a time: they run without the GIL
};

// One linear layer's FP4 casts; `readout`: the layer is the model's head
// (bf16 when bf16_layers names the head). Each cast returns fp32 values.
class Fp4Layer {
 public:
  Fp4Layer(std::shared_ptr<quant::Fp4Quantiser> q, bool readout)
      : q_(std::move(q)), weight_(readout ? autograd::Role::readout : autograd::Role::weight) {}

  bool active() const { return q_->active(weight_.param()); }

  // x [M, in]: (the forward product's operand, the weight-gradient product's).
  std::pair<nb::object, nb::object> cast_input(const In& x, bool record) {
    const float* in = f32_input(x);
    require_2d(x, "x");
    const int64_t rows = x.shape(0), cols = x.shape(1);
    QuantSite site = site_for(OperandRole::activation);
    site.record = record;
    Tensor decoded, wgrad;
    {
      KernelScope release(x.size());
      std::lock_guard lock(mutex_);
      const QuantisedOperand q = q_->quantise(f32_tensor(in, rows, cols), 1, rows, cols, 2, site, &decoded);
      wgrad = q_->decode(q);
    }
    return {values_array(decoded, decoded.scale(), shape_of(x)), values_array(wgrad, wgrad.scale(), shape_of(x))};
  }

  // w [out, in]: (the forward product's operand, the input-gradient product's).
  // A pass without gradient casts with a copy of the quantiser, so that it
  // neither draws from the model's stream nor replaces its cached cast.
  std::pair<nb::object, nb::object> cast_weight(const In& w, bool record) {
    const float* in = f32_input(w);
    require_2d(w, "w");
    const int64_t rows = w.shape(0), cols = w.shape(1);
    Tensor forward, dgrad;
    {
      KernelScope release(w.size());
      std::lock_guard lock(mutex_);
      const auto casts = [&](quant::Fp4Quantiser& q, HeldWeight& held) {
        QuantSite site = site_for(OperandRole::weight);
        site.key = &held.param();
        site.record = record;
        const quant::Fp4Quantiser::Weight c = q.quantise_weight(held.hold(in, rows, cols), 2, site);
        forward = c.decoded;
        dgrad = c.operand.backward.defined() ? c.operand.backward : c.decoded;
      };
      if (record) {
        casts(*q_, weight_);
      } else {
        quant::Fp4Quantiser scratch(q_->config());
        HeldWeight held(weight_.param().role);
        casts(scratch, held);
      }
    }
    return {values_array(forward, forward.scale(), shape_of(w)), values_array(dgrad, dgrad.scale(), shape_of(w))};
  }

  // dy [M, out] for the input-gradient product (blocks along out) or, with
  // `wgrad`, the weight-gradient product (blocks along M, rotated).
  nb::object cast_gradient(const In& dy, bool wgrad) {
    const float* in = f32_input(dy);
    require_2d(dy, "dy");
    const int64_t rows = dy.shape(0), cols = dy.shape(1);
    QuantSite site = site_for(OperandRole::grad_output);
    site.keep_codes = false;
    site.wgrad = wgrad;
    Tensor decoded;
    {
      KernelScope release(dy.size());
      std::lock_guard lock(mutex_);
      q_->quantise(f32_tensor(in, rows, cols), 1, rows, cols, wgrad ? 1 : 2, site, &decoded);
    }
    return values_array(decoded, decoded.scale(), shape_of(dy));
  }

 private:
  QuantSite site_for(OperandRole role) const {
    QuantSite s;
    s.key = &weight_.param();
    s.role = role;
    return s;
  }

  std::shared_ptr<quant::Fp4Quantiser> q_;
  HeldWeight weight_;
  std::mutex mutex_;  // one cast at a time: they run without the GIL
};

// The model's FP4 quantiser, shared by its layers.
struct Fp4Model {
  recipe::Recipe recipe;
  std::shared_ptr<quant::Fp4Quantiser> q;
  explicit Fp4Model(const recipe::Recipe& r)
      : recipe(r), q(std::dynamic_pointer_cast<quant::Fp4Quantiser>(amp::precision_policy(r).quantiser)) {
    if (!q) throw nb::value_error(("recipe '" + r.name + "': its products are not cast by the FP4 quantiser").c_str());
  }
};

}  // namespace

void bind_quant(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<Fp8Cast>(m, "Fp8Cast", "One FP8 cast: values, 1-byte codes, per-tensor exponent, block exponents.")
      .def_ro("values", &Fp8Cast::values, "code x every scale, float32, x's shape (`out` when given)")
      .def_ro("codes", &Fp8Cast::codes, "the 1-byte codes (uint8), x's shape")
      .def_ro("exponent", &Fp8Cast::exponent, "E of the per-tensor scale 2^E (0 for block scalings)")
      .def_ro("block_exponents", &Fp8Cast::block_exponents,
              "int8 [ceil(rows / tile rows), ceil(cols / tile cols)] for MX / blockwise, else None");
  nb::class_<Fp8Operand>(m, "Fp8Quantiser",
                         "The engine's FP8 quantiser for one operand role of one product, built from the recipe "
                         "as a training run builds it; holds that operand's state (amax history, exponent).")
      .def(nb::init<const recipe::Recipe&, OperandRole, int64_t>(), "recipe"_a, "role"_a, "block"_a = 32)
      .def("cast", &Fp8Operand::cast, "x"_a, "out"_a = nb::none(), "record"_a = true,
           "x (float32) cast, viewed as [rows, last axis] with the contraction along the last axis (weights: 2-D). "
           "out: a float32 array of x's shape for the values (x itself: in place). record false: a pass without "
           "gradient, which leaves delayed scaling's history alone.")
      .def("end_step", &Fp8Operand::end_step,
           "Ends a step: delayed scaling puts the step's amax into the history and takes the next exponent.")
      .def_prop_ro("format", &Fp8Operand::format, "the cast format's name")
      .def_prop_ro("scaling", &Fp8Operand::scaling)
      .def_prop_ro("history", &Fp8Operand::history, "delayed scaling's amaxes, oldest first")
      .def_prop_ro("next_exponent", &Fp8Operand::next_exponent,
                   "the exponent delayed scaling's next cast uses; None before the first end_step");
  nb::class_<Fp4Layer>(m, "Fp4Layer", "One linear layer's FP4 casts (y = x W^T) by the model's Fp4Quantiser.")
      .def_prop_ro("active", &Fp4Layer::active, "False: the layer runs in bf16 (bf16_layers names the head)")
      .def("cast_input", &Fp4Layer::cast_input, "x"_a, "record"_a = true,
           "x [M, in]: (forward operand, weight-gradient operand), float32; record false: no gradient will flow")
      .def("cast_weight", &Fp4Layer::cast_weight, "w"_a, "record"_a = true,
           "W [out, in]: (forward operand, input-gradient operand), float32")
      .def("cast_gradient", &Fp4Layer::cast_gradient, "dy"_a, "wgrad"_a,
           "dy [M, out] for the input-gradient product or (wgrad) the weight-gradient product, float32");
  nb::class_<Fp4Model>(m, "Fp4Quantiser",
                       "The engine's FP4 quantiser for one model, built from the recipe as a training run builds "
                       "it; its layers share its stochastic-rounding stream.")
      .def(nb::init<const recipe::Recipe&>(), "recipe"_a)
      .def_ro("recipe", &Fp4Model::recipe)
      .def("__getstate__", [](const Fp4Model& m) { return m.recipe; })
      .def("__setstate__", [](Fp4Model& m, const recipe::Recipe& r) { new (&m) Fp4Model(r); },
           "A copy draws a new stream: from rht_seed's first draw.")
      .def("layer", [](const Fp4Model& m, bool readout) { return new Fp4Layer(m.q, readout); }, "readout"_a = false,
           "A linear layer's casts; readout: the model's head.");
}

}  // namespace mantissa::py
