// Reverse-mode autograd on a tape. One Tape per forward pass: every op that
// sees an input needing a gradient appends a backward closure; backward()
// runs them newest first and destroys each one after it ran, so tensors saved
// for the backward pass are freed as it goes. A Var is a value plus, when a
// gradient flows to it, a shared GradNode; closures hold GradNodes and the
// tensors they saved, never whole Vars, so dropping a Var drops its value
// unless an op chose to save it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mantissa/autograd/policy.hpp"
#include "mantissa/tensor/tensor.hpp"

namespace mantissa::autograd {

struct Parameter;

// Gradient of one value, fp32. Contributions are accumulated; a first
// contribution is adopted without a copy (copy-on-write if it is shared).
struct GradNode {
  explicit GradNode(Shape s) : shape(std::move(s)) {}
  Shape shape;
  Tensor grad;                    // undefined until something flows here
  bool external = false;          // grad is a Parameter's gradient: always add in place

  bool has_grad() const { return grad.defined(); }
  // Adds g; takes g's storage when this is the first contribution.
  void accumulate(const Tensor& g);
  // Adds alpha * g.
  void accumulate_scaled(const Tensor& g, float alpha);
  // The gradient as a writable buffer (zero-filled when new) for kernels that add (+=).
  Tensor& buffer();
  // A writable buffer; *has_data tells whether it holds earlier contributions
  // (then add, else overwrite): saves the zero fill for matmuls.
  Tensor& writable(bool* has_data);
};

struct Var {
  Tensor value;
  std::shared_ptr<GradNode> node;   // null: no gradient is wanted for this value
  Parameter* param = nullptr;   // set for parameter leaves (weight-cast cache key)

  bool requires_grad() const { return node != nullptr; }
  const Shape& shape() const { return value.shape(); }
  int64_t dim(int i) const { return value.dim(i); }
  int64_t numel() const { return value.numel(); }
};

// Weights converted to the matmul dtype once per Parameter::version: this
// object's entries in the derived-value cache (tensor/derived_cache.hpp),
// freed with it or with their parameter.
class CastCache {
 public:
  CastCache() = default;
  CastCache(const CastCache&) = delete;
  CastCache& operator=(const CastCache&) = delete;
  ~CastCache() { clear(); }
  const Tensor& get(const Parameter& p, DType dtype);
  void clear();
  size_t bytes() const;
};

// Everything an op consults besides its inputs.
struct OpContext {
  PrecisionPolicy policy;
  CastCache* casts = nullptr;  // null: weights are cast on every use
  bool training = true;        // dropout active
  uint64_t seed = 0;           // dropout stream of this pass
  uint64_t dropout_calls = 0;  // advanced by every dropout op (the kernel's `offset`)
  uint64_t quant_calls = 0;    // advanced by every cast product of two activations (QuantSite::ordinal)
  uint64_t save_calls = 0;     // advanced by every 1-byte save (SavedScaleHints' site)
  uint64_t copy_saves = 0;     // advanced by every 16-bit save (SaveObserver::saved_copy's site)
  // Scale analysis: when set, models report named forward values and (through
  // identity ops) their gradients here; null in training.
  std::function<void(const std::string& name, bool backward, const Tensor& value)> observer;
};

// Gradient recording is on unless a NoGrad scope is alive on this thread.
bool grad_enabled();
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

class Tape {
 public:
  explicit Tape(OpContext ctx = {}) : ctx_(ctx) {}
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  OpContext& ctx() { return ctx_; }
  const PrecisionPolicy& policy() const { return ctx_.policy; }

  // Leaves. A parameter leaf accumulates into Parameter::grad.
  Var param(Parameter& p);
  Var constant(Tensor value) const;                   // no gradient
  Var leaf(Tensor value, bool requires_grad = true);  // gradient kept in var.node->grad

  // True when an op with these inputs must record its backward.
  bool wants_grad(std::initializer_list<const Var*> inputs) const;
  // A result Var: with a GradNode when `record` is true.
  static Var result(Tensor value, bool record);
  void record(std::function<void()> backward);

  // Activation storage under the policy (src/autograd/saved.cpp): a
  // reference when saved == f32, else a 16-bit copy of an f32 value (bf16
  // when saved is a 1-byte format). save_compact() is for backward passes
  // that read the copy only through restore() / restore_bf16(): under a
  // 1-byte policy it keeps codes with a per-tensor power-of-two scale from
  // the tensor's amax (in Tensor::scale()), also of a bf16 value.
  // restore() gives fp32 back for the backward kernels, restore_bf16() the
  // exact bf16 values of a bf16 or 1-byte saved tensor.
  Tensor save(const Tensor& x);
  Tensor save_compact(const Tensor& x);
  // Under a 1-byte policy: x [.., C] (f32) less each row's mean [rows], saved
  // as save_compact would save that difference, in one pass over x.
  Tensor save_centered(const Tensor& x, const Tensor& row_mean);
  static Tensor restore(const Tensor& saved);
  static Tensor restore_bf16(const Tensor& saved);
  // code -> bf16 bits of a 1-byte FP8 dtype (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz; exact):
  // value = table[code] x scale, for kernels that decode codes as they read them
  // (saved activations, and scaling/fp8_cast's operands). Other dtypes: invalid_argument.
  static const std::array<uint16_t, 256>& decode_table(DType codes);
  // x (f32 or bf16) as 1-byte `codes` scaled by 2^E, E minimal with amax x 2^-E <= max
  // (the amax of the finite 4096-element chunks). With `hint` (a site's last
  // E, updated to this one) it tries that E first; the result is the same.
  static Tensor encode_scaled(const Tensor& x, DType codes, int* hint = nullptr, bool* reencoded = nullptr);
  // Operand of a matrix product in the policy's matmul dtype (weights cached;
  // products that read one activation in a row, as q, k and v, share its cast).
  Tensor matmul_operand(const Var& v) const;

  // Seeds d(root) = seed (every element) and runs the tape newest first.
  void backward(const Var& root, float seed = 1.0f);
  // Seeds d(root) = grad (fp32, root's shape): a vector-Jacobian product.
  void backward(const Var& root, const Tensor& grad);
  size_t size() const { return ops_.size(); }
  void clear() {
    ops_.clear();
    last_cast_source_ = Tensor();
    last_cast_ = Tensor();
  }

 private:
  // A 1-byte save of x (less row_mean per row of `cols` when not null).
  Tensor save_source(const Tensor& x, const float* row_mean, int64_t cols);

  OpContext ctx_;
  std::vector<std::function<void()>> ops_;
  // The last activation cast by matmul_operand and its cast. Holding the source
  // keeps its storage shared, so no op writes it in place while the cast is reused.
  mutable Tensor last_cast_source_, last_cast_;
};

// The readout's product uncast: while alive, matrix products on `t` run in
// the policy's matmul dtype without the quantiser when the policy says
// cast_readout = false (the backward closures keep what they recorded).
class ReadoutScope {
 public:
  explicit ReadoutScope(Tape& t) : t_(t), saved_(t.ctx().policy.quantiser) {
    if (!t.policy().cast_readout) t.ctx().policy.quantiser = nullptr;
  }
  ~ReadoutScope() { t_.ctx().policy.quantiser = std::move(saved_); }
  ReadoutScope(const ReadoutScope&) = delete;
  ReadoutScope& operator=(const ReadoutScope&) = delete;

 private:
  Tape& t_;
  std::shared_ptr<OperandQuantiser> saved_;
};

}  // namespace mantissa::autograd
