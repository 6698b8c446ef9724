// The `propagate` quantiser: see the table in scalify_quantiser.hpp.
#include "mantissa/scalify/scalify_quantiser.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <stdexcept>

#include "mantissa/autograd/parameter.hpp"
#include "mantissa/cpu/profile.hpp"
#include "mantissa/quant/fp8.hpp"
#include "mantissa/scalify/propagate.hpp"
#include "mantissa/scalify/scalify_cast.hpp"
#include "mantissa/tensor/derived_cache.hpp"

namespace mantissa::scalify {

namespace {

const DerivedCache::Kind kScalifyWeight{"scalify weight cast"};
const DerivedCache::Kind kScalifyScale{"scalify parameter scale"};

int exponent_of(double pow2_scale) {
  int e = 0;
  std::frexp(pow2_scale, &e);
  return std::clamp(e - 1, -126, 126);
}

Tensor as_f32(const Tensor& x) { return x.dtype() == DType::f32 ? x : x.to(DType::f32, MemoryKind::workspace); }

// A cast format: fp16 (decoded to f32) or one with a 1-byte dtype (decoded to bf16).
formats::Format cast_format(const formats::Format& f, const char* which) {
  if (is_fp16_format(f)) return f;
  try {
    quant::cast_dtype(f);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(std::string("scalify quantiser: ") + which + " format '" + f.name +
                                "' cannot be cast (valid: fp16, e4m3fn, e5m2, e4m3fnuz, e5m2fnuz)");
  }
  return f;
}

}  // namespace

ScalifyQuantiser::ScalifyQuantiser(ScalifyOptions options, std::vector<autograd::Parameter*> params)
    : options_(std::move(options)) {
  if (options_.rounding == ScaleRounding::stochastic)
    throw std::invalid_argument("scalify quantiser: stochastic scale rounding is not supported here (use down/up/nearest)");
  if (options_.forward_format) {
    fwd_ = cast_format(*options_.forward_format, "forward");
    cast_fwd_ = true;
  }
  if (options_.backward_format) {
    bwd_ = cast_format(*options_.backward_format, "backward");
    cast_bwd_ = true;
  }
  std::set<int> blocks;
  for (const autograd::Parameter* p : params) {
    if (!p) throw std::invalid_argument("scalify quantiser: null parameter");
    known_.insert(p);
    if (p->block >= 0) blocks.insert(p->block);
  }
  for (const autograd::Parameter* p : params)
    for (const autograd::Parameter* in : {p->input, p->query, p->key, p->gate})
      if (in && known_.count(in) && in->role == autograd::Role::weight) consumer_[in] = p;
  stats_.layers = static_cast<int64_t>(blocks.size());
}

ScalifyQuantiser::~ScalifyQuantiser() { derived_cache().forget_owner(this); }

size_t cached_bytes(const ScalifyQuantiser::CachedWeight& w) {
  return (w.operand.defined() ? w.operand.bytes() : 0) + mantissa::cached_bytes(w.decoded);
}

double ScalifyQuantiser::param_scale(const autograd::Parameter* p) const {
  if (p == nullptr || !known_.count(p)) return 0.0;
  auto& slot = derived_cache().slot<double>(p, this, kScalifyScale);
  {
    std::lock_guard lock(scale_mutex_);
    if (slot.version == p->version) return slot.value;
  }
  // Part of the casts the scale is for (the weight's own, and the
  // activations' propagated ones).
  const cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  const Tensor v = as_f32(p->value);
  const float* x = v.f32();
  const int64_t n = v.numel();
  double ss = 0;  // squares of floats are exact in double; the sum's order does not matter at that precision
#pragma omp parallel for simd reduction(+ : ss) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const double rms = std::sqrt(ss / static_cast<double>(std::max<int64_t>(n, 1)));
  const double s = !(rms > 0) || !std::isfinite(rms) ? 0.0 : static_cast<double>(pow2_round(rms, options_.rounding));
  std::lock_guard lock(scale_mutex_);
  slot.value = s;
  slot.version = p->version;
  return s;
}

std::optional<int> ScalifyQuantiser::propagated_exponent(const autograd::Parameter* p, autograd::OperandRole role) {
  using Through = autograd::Parameter::Through;
  Pow2Rounder r(options_.rounding);  // never stochastic here (the constructor refuses it)
  auto fan = [&](int64_t k) { return static_cast<double>(scale_rule::sqrt_fan(k, r)); };
  auto fan_out = [](const autograd::Parameter* w) { return w->value.numel() / std::max<int64_t>(w->fan_in, 1); };
  auto declared = [&](const autograd::Parameter* w) { return w && known_.count(w) && w->input && known_.count(w->input); };
  // The scale of the input operand of matmul weight w (0 when unknown): a
  // norm's output by the layer-norm or RMS-norm rule; a linear's output by
  // the matmul and add rules, then through the op between the two linears.
  std::function<double(const autograd::Parameter*)> input_scale;
  // The scale of linear w's output (0 when its input is not declared).
  auto output_scale = [&](const autograd::Parameter* w) -> double {
    if (!declared(w)) return 0;
    return scale_rule::add(scale_rule::matmul(input_scale(w), param_scale(w), fan(w->fan_in)), param_scale(w->bias), r);
  };
  input_scale = [&](const autograd::Parameter* w) -> double {
    if (!declared(w)) return 0;
    const autograd::Parameter* in = w->input;
    if (in->role == autograd::Role::norm_gain)
      return in->bias ? scale_rule::layer_norm(param_scale(in), param_scale(in->bias), r)
                      : scale_rule::rms_norm(param_scale(in));
    const double out = output_scale(in);
    switch (w->through) {
      case Through::attention: return scale_rule::attention(out);
      case Through::pointwise: return scale_rule::gelu(out);
      case Through::gated: return scale_rule::swiglu(output_scale(w->gate), out);
      case Through::direct: break;
    }
    return out;
  };
  double s = 0;
  if (role == autograd::OperandRole::grad_output) {
    // The gradient arriving at p's output is the one leaving the linear that
    // consumes it, through that linear's weight and the op in between.
    std::lock_guard lock(mutex_);
    const auto c = consumer_.find(p);
    const auto e = c == consumer_.end() ? grad_exponent_.end() : grad_exponent_.find(c->second);
    if (e != grad_exponent_.end()) {
      const autograd::Parameter& next = *c->second;
      s = scale_rule::matmul(std::ldexp(1.0, e->second), param_scale(&next), fan(fan_out(&next)));
      switch (next.through) {
        case Through::attention:
          if (!next.query || !next.key) {  // one fused qkv product
            s = scale_rule::causal_attention_backward(s, input_scale(&next));
          } else {
            // G query heads per kv head: the query product is G times wider than the key product.
            const double rg = fan(std::max<int64_t>(fan_out(next.query) / std::max<int64_t>(fan_out(next.key), 1), 1));
            const double v = output_scale(next.input);
            if (p == next.input) s = scale_rule::attention_backward_value(s, rg);
            else if (p == next.query) s = scale_rule::attention_backward_score(s, v, output_scale(next.key), 1.0);
            else s = scale_rule::attention_backward_score(s, v, output_scale(next.query), rg);
          }
          break;
        case Through::pointwise: s = scale_rule::gelu_backward(s); break;
        case Through::gated:
          s = p == next.input ? scale_rule::swiglu_backward_up(s, output_scale(next.gate))
                              : scale_rule::swiglu_backward_gate(s, output_scale(next.input));
          break;
        case Through::direct: break;
      }
    }
  } else {
    s = input_scale(p);
  }
  if (s > 0 && std::isfinite(s)) return exponent_of(s);
  return std::nullopt;  // no propagated scale: dynamic rescale from the tensor's norm
}

int ScalifyQuantiser::amax_exponent(const quant::Amax& a) const {
  return a.nonfinite || !(a.value > 0) ? 0 : exponent_of(pow2_round(a.value, options_.rounding));
}

int ScalifyQuantiser::norm_exponent(const Tensor& x32) const {
  if (options_.rescale_norm == Norm::max) return amax_exponent(quant::amax_of(x32.f32(), x32.numel()));
  const cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  const float* v = x32.f32();
  const int64_t n = x32.numel();
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(v[i]));
    if (!std::isfinite(a)) return 0;
    acc += options_.rescale_norm == Norm::l1 ? a : a * a;
  }
  const auto count = static_cast<double>(std::max<int64_t>(n, 1));
  acc = options_.rescale_norm == Norm::l1 ? acc / count : std::sqrt(acc / count);
  if (!(acc > 0)) return 0;
  return exponent_of(pow2_round(acc, options_.rounding));
}

autograd::QuantisedOperand ScalifyQuantiser::cast_dynamic(const formats::Format& f, const Tensor& x32,
                                                          const std::string& key, int* exponent, int64_t* saturated,
                                                          Tensor* decoded, bool keep_codes) {
  // With the max norm the cast pass itself yields the amax: the site's last
  // exponent is tried first, and when x's amax calls for that same exponent
  // (the usual case: a site's amax moves little between steps) the cast is
  // the one an amax pass would have led to. Otherwise it is redone.
  std::optional<int> guess;
  if (options_.rescale_norm == Norm::max) {
    std::lock_guard lock(mutex_);
    const auto it = last_.find(key);
    if (it != last_.end()) guess = it->second;
  }
  if (guess) {
    quant::Amax a;
    autograd::QuantisedOperand q = cast(f, x32, *guess, saturated, MemoryKind::activation, decoded, &a, keep_codes);
    *exponent = amax_exponent(a);
    if (*exponent == *guess) return q;
    if (decoded) *decoded = Tensor();  // freed before the second cast allocates
    std::lock_guard lock(mutex_);
    ++stats_.recasts;
  } else {
    *exponent = norm_exponent(x32);
  }
  return cast(f, x32, *exponent, saturated, MemoryKind::activation, decoded, nullptr, keep_codes);
}

autograd::QuantisedOperand ScalifyQuantiser::quantise(const Tensor& x, int64_t, int64_t, int64_t, int,
                                                      const autograd::QuantSite& site, Tensor* decoded) {
  const bool grad = site.role == autograd::OperandRole::grad_output;
  if (grad ? !cast_bwd_ : !cast_fwd_) throw std::logic_error("scalify quantiser: this pass is not cast");
  const auto* p = static_cast<const autograd::Parameter*>(site.key);  // QuantSite: key is the product's Parameter
  const std::string name = p ? p->name : "activation-product#" + std::to_string(site.ordinal);
  const std::string key = std::string(grad ? "grad_output:" : "activation:") + name;
  const std::optional<int> propagated = propagated_exponent(p, site.role);
  const bool dynamic = !propagated;
  const Tensor x32 = as_f32(x);
  const bool keep = site.keep_codes || !decoded;
  int64_t saturated = 0;
  int e = propagated.value_or(0);
  autograd::QuantisedOperand q =
      dynamic ? cast_dynamic(grad ? bwd_ : fwd_, x32, key, &e, &saturated, decoded, keep)
              : cast(grad ? bwd_ : fwd_, x32, e, &saturated, MemoryKind::activation, decoded, nullptr, keep);
  std::lock_guard lock(mutex_);
  ++stats_.casts;
  stats_.saturated_values += saturated;
  last_[key] = e;
  if (grad && p && p->input && p->input->role == autograd::Role::weight) grad_exponent_[p] = e;
  if (dynamic && site.record) {
    ++stats_.dynamic_rescales;
    ++step_rescales_;
  }
  return q;
}

autograd::OperandQuantiser::Weight ScalifyQuantiser::quantise_weight(const autograd::Parameter& p, int contraction_axis,
                                                                     const autograd::QuantSite&) {
  if (!cast_fwd_) throw std::logic_error("scalify quantiser: no forward cast configured");
  auto& slot = derived_cache().slot<CachedWeight>(&p, this, kScalifyWeight);
  CachedWeight* w = &slot.value;
  if (!(w->operand.defined() && slot.version == p.version && w->axis == contraction_axis)) {
    const double s = param_scale(&p);
    const int e = s > 0 ? exponent_of(s) : 0;
    int64_t saturated = 0;
    w->operand = cast(fwd_, as_f32(p.value), e, &saturated, MemoryKind::workspace, &w->decoded);
    slot.version = p.version;
    w->axis = contraction_axis;
    ++w->generation;
    std::lock_guard lock(mutex_);
    ++stats_.casts;
    stats_.saturated_values += saturated;
    last_["weight:" + p.name] = e;
  }
  return Weight{w->operand, w->decoded, w, w->generation};
}

autograd::QuantisedOperand ScalifyQuantiser::cast(const formats::Format& f, const Tensor& x32, int exponent,
                                                  int64_t* saturated, MemoryKind kind, Tensor* decoded,
                                                  quant::Amax* amax, bool keep_codes) const {
  if (is_fp16_format(f)) return cast_fp16(x32, exponent, saturated, kind, decoded, MemoryKind::workspace, amax);
  // FP8: finite values saturate; a tensor holding inf/NaN is cast without
  // saturation (cast_per_tensor redoes it), so they stay non-finite.
  return cast_per_tensor(f, x32, exponent, true, saturated, kind, decoded, amax, keep_codes);
}

// fp16 codes decode exactly to f32 (not to bf16: 11 significant bits), FP8
// codes exactly to bf16.
Tensor ScalifyQuantiser::decode(const autograd::QuantisedOperand& q) const {
  if (q.codes.dtype() == DType::f16) return decode_fp16_to_f32(q, MemoryKind::workspace);
  return quant::decode_to_bf16(q, MemoryKind::workspace);
}

void ScalifyQuantiser::end_step() {
  std::lock_guard lock(mutex_);
  stats_.last_step_rescales = step_rescales_;
  step_rescales_ = 0;
  grad_exponent_.clear();
}

ScalifyStats ScalifyQuantiser::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::map<std::string, int> ScalifyQuantiser::last_exponents() const {
  std::lock_guard lock(mutex_);
  return last_;
}

std::shared_ptr<autograd::OperandQuantiser> make_scalify_quantiser(const ScalifyOptions& options,
                                                                  std::vector<autograd::Parameter*> params) {
  return std::make_shared<ScalifyQuantiser>(options, std::move(params));
}

}  // namespace mantissa::scalify
