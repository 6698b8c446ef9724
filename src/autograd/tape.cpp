#include "mantissa/autograd/tape.hpp"

#include <stdexcept>

#include "mantissa/kernels/kernels.hpp"
#include "mantissa/autograd/parameter.hpp"
#include "mantissa/tensor/derived_cache.hpp"
#include "mantissa/tensor/memory_trace.hpp"

namespace mantissa::autograd {
namespace {
thread_local bool t_grad_enabled = true;

void check_shape(const Shape& want, const Tensor& g) {
  if (g.shape() != want)
    throw std::logic_error("autograd: gradient of shape " + shape_str(g.shape()) + " for a value of shape " +
                           shape_str(want));
}
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
NoGrad::NoGrad() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGrad::~NoGrad() { t_grad_enabled = previous_; }

// ---- GradNode ----------------------------------------------------------------------
void GradNode::accumulate(const Tensor& g) {
  check_shape(shape, g);
  if (!grad.defined()) {
    grad = g;  // adopted; copied before anyone writes into it while shared
    return;
  }
  Tensor& acc = buffer();
  kernels::add_inplace(acc.f32(), g.f32(), acc.numel());
}

void GradNode::accumulate_scaled(const Tensor& g, float alpha) {
  check_shape(shape, g);
  if (alpha == 1.0f) return accumulate(g);
  bool has = false;
  Tensor& acc = writable(&has);
  if (has) kernels::axpy(acc.f32(), g.f32(), alpha, acc.numel());
  else kernels::scale(acc.f32(), g.f32(), alpha, acc.numel());
}

Tensor& GradNode::buffer() {
  bool has = false;
  Tensor& g = writable(&has);
  if (!has) g.zero_();
  return g;
}

Tensor& GradNode::writable(bool* has_data) {
  if (!grad.defined()) {
    grad = Tensor::empty(shape, DType::f32, MemoryKind::activation);
    *has_data = false;
    return grad;
  }
  // A Parameter's gradient is shared with the Parameter by design.
  if (!external && !grad.storage_unique()) grad = grad.clone(MemoryKind::activation);
  *has_data = true;
  return grad;
}

// ---- CastCache -----------------------------------------------------------------------
namespace {
struct Cast {
  DType dtype = DType::f32;
  Tensor value;
};
size_t cached_bytes(const Cast& c) { return mantissa::cached_bytes(c.value); }
const DerivedCache::Kind kWeightCast{"weight cast"};
}  // namespace

const Tensor& CastCache::get(const Parameter& p, DType dtype) {
  auto& slot = derived_cache().slot<Cast>(&p, this, kWeightCast);
  Cast& e = slot.value;
  if (slot.version != p.version || e.dtype != dtype || !e.value.defined()) {
    e.value = p.value.to(dtype, MemoryKind::workspace);
    slot.version = p.version;
    e.dtype = dtype;
  }
  return e.value;
}

void CastCache::clear() { derived_cache().forget_owner(this); }

size_t CastCache::bytes() const { return derived_cache().bytes(this); }

// ---- Tape ------------------------------------------------------------------------------
Var Tape::param(Parameter& p) {
  Var v;
  v.value = p.value;
  v.param = &p;
  if (grad_enabled()) {
    if (!p.grad.defined()) p.grad = Tensor::zeros(p.value.shape(), DType::f32, MemoryKind::gradient);
    v.node = std::make_shared<GradNode>(p.value.shape());
    v.node->grad = p.grad;
    v.node->external = true;
  }
  return v;
}

Var Tape::constant(Tensor value) const {
  Var v;
  v.value = std::move(value);
  return v;
}

Var Tape::leaf(Tensor value, bool requires_grad) {
  Var v;
  v.value = std::move(value);
  if (requires_grad && grad_enabled()) v.node = std::make_shared<GradNode>(v.value.shape());
  return v;
}

bool Tape::wants_grad(std::initializer_list<const Var*> inputs) const {
  if (!grad_enabled()) return false;
  for (const Var* v : inputs)
    if (v && v->node) return true;
  return false;
}

Var Tape::result(Tensor value, bool record) {
  Var v;
  v.value = std::move(value);
  if (record) v.node = std::make_shared<GradNode>(v.value.shape());
  return v;
}

void Tape::record(std::function<void()> backward) {
  if (memory_trace_on()) {  // backward allocations carry the label of the op that recorded them
    backward = [label = current_memory_label() + "/backward", fn = std::move(backward)]() {
      MemoryLabel l(label);
      fn();
    };
  }
  ops_.push_back(std::move(backward));
}

Tensor Tape::matmul_operand(const Var& v) const {
  DType t = ctx_.policy.matmul;
  if (t == DType::f32 || v.value.dtype() == t) return v.value;
  if (t != DType::bf16 && t != DType::f16)
    throw std::invalid_argument(std::string("matmul dtype ") + dtype_name(t) + " is not supported (f32, bf16 or f16)");
  if (v.param) return ctx_.casts ? ctx_.casts->get(*v.param, t) : v.value.to(t, MemoryKind::activation);
  const Tensor& s = last_cast_source_;
  if (s.defined() && s.same_storage(v.value) && s.raw() == v.value.raw() && s.shape() == v.value.shape() &&
      s.dtype() == v.value.dtype() && s.scale() == v.value.scale() && last_cast_.dtype() == t)
    return last_cast_;
  last_cast_ = v.value.to(t, MemoryKind::activation);
  last_cast_source_ = v.value;
  return last_cast_;
}

void Tape::backward(const Var& root, float seed) {
  Tensor g = Tensor::empty(root.shape(), DType::f32, MemoryKind::activation);
  g.fill(seed);
  backward(root, g);
}

void Tape::backward(const Var& root, const Tensor& grad) {
  if (!root.node) throw std::logic_error("Tape::backward: the root does not require a gradient");
  last_cast_source_ = Tensor();
  last_cast_ = Tensor();
  if (grad.dtype() != DType::f32) throw std::invalid_argument("Tape::backward: the seed gradient must be f32");
  root.node->accumulate(grad);
  // Newest first; each closure is destroyed right after it ran so that its
  // saved tensors and the gradients only it referenced are freed.
  for (size_t i = ops_.size(); i-- > 0;) {
    ops_[i]();
    ops_[i] = nullptr;
  }
  ops_.clear();
}

}  // namespace mantissa::autograd
