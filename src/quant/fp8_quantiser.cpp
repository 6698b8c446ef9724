// The FP8 operand quantiser behind the fp8-*, mxfp8, unit-fp8 and
// fp8-noscale recipes: chooses each cast's scale, keeps delayed scaling's
// per-site amax histories and caches weight casts per Parameter version.
//
// Per-site state and activation checkpointing: sites are keyed by the
// Parameter a product multiplies by (or by the call order of products of two
// activations), so a checkpoint replay in the backward pass hits the same
// site. The first forward of a checkpointed segment runs without gradient
// and does not record (QuantSite::record); the replay records. Within a step
// a site's scale is fixed and its amax slot is a max, so recording the same
// tensor twice (gradient accumulation aside, a replay of a recorded pass)
// cannot change the history: replays never double-update it.
#include <algorithm>
#include <optional>
#include <stdexcept>

#include "mantissa/autograd/parameter.hpp"
#include "mantissa/quant/fp8.hpp"
#include "mantissa/tensor/derived_cache.hpp"

namespace mantissa::quant {

using autograd::OperandRole;
using autograd::QuantisedOperand;
using autograd::QuantSite;

// A weight's cast: this quantiser's entry for the parameter in the
// derived-value cache, refreshed when the parameter's version moves.
struct Fp8Quantiser::CachedWeight {
  int axis = 0;
  int exponent = 0;      // delayed: the site exponent the cast used
  bool has_exponent = false;
  Amax amax;             // of the weight, re-recorded on cache hits
  int generation = 0;    // the GEMM packing cache's version of `decoded`
  QuantisedOperand operand;
  Tensor decoded;
};

namespace {
const DerivedCache::Kind kFp8Weight{"fp8 weight cast"};
}  // namespace

size_t cached_bytes(const Fp8Quantiser::CachedWeight& w) {
  return (w.operand.defined() ? w.operand.bytes() : 0) + mantissa::cached_bytes(w.decoded);
}

namespace {
formats::Format cast_format(const std::optional<formats::Format>& format, const char* field) {
  if (!format) return {};
  try {
    cast_dtype(*format);  // throws unless a 1-byte tensor dtype exists
    return *format;
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(field) + ": " + e.what());
  }
}
}  // namespace

Fp8Quantiser::Fp8Quantiser(Fp8Config config)
    : config_(std::move(config)),
      fwd_(cast_format(config_.forward_format, "cast_forward")),
      bwd_(cast_format(config_.backward_format, "cast_backward")),
      cast_fwd_(config_.forward_format.has_value()),
      cast_bwd_(config_.backward_format.has_value()) {
  if (config_.amax_history < 1) throw std::invalid_argument("Fp8Quantiser: amax_history must be >= 1");
  if (config_.mx_block < 1 || config_.tile < 1) throw std::invalid_argument("Fp8Quantiser: block sizes must be >= 1");
  if (config_.scaling == CastScaling::propagate)
    throw std::invalid_argument("Fp8Quantiser: cast scaling 'propagate' is the scalify quantiser's (make_scalify_quantiser)");
}

Fp8Quantiser::~Fp8Quantiser() { derived_cache().forget_owner(this); }

Fp8Stats Fp8Quantiser::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

size_t Fp8Quantiser::site_count() const {
  std::lock_guard lock(mutex_);
  return sites_.size();
}

Fp8Quantiser::SiteState Fp8Quantiser::site_state(const QuantSite& site) const {
  std::lock_guard lock(mutex_);
  auto it = sites_.find({site.key, site.key ? 0 : site.ordinal, static_cast<int>(site.role)});
  return it == sites_.end() ? SiteState{} : it->second;
}

// The exponent a per-tensor cast uses now if it does not depend on the
// tensor: unit scaling's 0, and delayed scaling's site exponent (from its
// history). Delayed scaling's first step at a site, when there is no history
// yet, and current scaling scale from the tensor's own amax (Transformer
// Engine starts delayed scaling at scale 1, which would flush a standard
// model's gradients in that step).
std::optional<int> Fp8Quantiser::exponent_before_cast(const QuantSite& site) const {
  if (config_.scaling == CastScaling::unit) return 0;
  if (config_.scaling == CastScaling::delayed) {
    std::lock_guard lock(mutex_);
    auto it = sites_.find({site.key, site.key ? 0 : site.ordinal, static_cast<int>(site.role)});
    if (it != sites_.end() && it->second.has_exponent) return it->second.exponent;
  }
  return std::nullopt;
}

std::optional<int> Fp8Quantiser::last_exponent(const QuantSite& site) const {
  std::lock_guard lock(mutex_);
  auto it = sites_.find({site.key, site.key ? 0 : site.ordinal, static_cast<int>(site.role)});
  if (it == sites_.end() || !it->second.has_last) return std::nullopt;
  return it->second.last_exponent;
}

void Fp8Quantiser::record(const QuantSite& site, const Amax& a, int64_t saturated, bool record_amax,
                          std::optional<int> exponent) {
  std::lock_guard lock(mutex_);
  ++stats_.casts;
  if (saturated > 0) {
    ++stats_.saturated_casts;
    stats_.saturated_values += saturated;
  }
  if (a.nonfinite) ++stats_.nonfinite_casts;
  SiteState& s = sites_[{site.key, site.key ? 0 : site.ordinal, static_cast<int>(site.role)}];
  if (exponent) {
    s.has_last = true;
    s.last_exponent = *exponent;
  }
  if (!record_amax || a.nonfinite) return;
  s.step_amax = s.seen_this_step ? std::max(s.step_amax, a.value) : a.value;
  s.seen_this_step = true;
}

QuantisedOperand Fp8Quantiser::cast(const formats::Format& f, const Tensor& x32, int64_t batch, int64_t rows,
                                    int64_t cols, int contraction_axis, bool weight, const QuantSite& site,
                                    MemoryKind kind, Amax* amax_out, Tensor* decoded) {
  if (contraction_axis != 1 && contraction_axis != 2)
    throw std::invalid_argument("Fp8Quantiser: contraction_axis must be 1 (rows) or 2 (cols)");
  const bool keep = site.keep_codes || !decoded;  // codes are skipped only when a decode is wanted
  if (config_.scaling == CastScaling::mx || config_.scaling == CastScaling::blockwise) {
    const int64_t along = config_.scaling == CastScaling::mx ? config_.mx_block : config_.tile;
    int64_t tr = contraction_axis == 1 ? along : 1, tc = contraction_axis == 2 ? along : 1;
    if (config_.scaling == CastScaling::blockwise && weight) tr = tc = config_.tile;  // 128x128 weight blocks
    // MX with ceil exponents is blockwise's rule on MX's 1 x 32 tiles.
    const CastScaling rule = config_.scaling == CastScaling::mx && config_.mx_scale_rounding == formats::ScaleRounding::ceil
                                ? CastScaling::blockwise
                                : config_.scaling;
    CastReport report;
    QuantisedOperand q = cast_blocks(f, x32, batch, rows, cols, tr, tc, rule, &report, kind, decoded, keep);
    record(site, report.amax, report.saturated, false);
    if (amax_out) *amax_out = report.amax;
    return q;
  }
  // One pass over x when the exponent is known beforehand. Else current
  // scaling first casts with the site's last exponent: the pass also gives
  // x's amax, and when the exponent that amax calls for is the one used (the
  // usual case: amaxes move little between steps) the cast is the one an
  // amax pass would have led to. Otherwise (or with no last exponent) the
  // cast is redone with the right exponent.
  const auto exponent_for = [&](const Amax& m) {
    return m.nonfinite ? 0 : per_tensor_exponent(f.max(), m.value, config_.margin);
  };
  std::optional<int> e = exponent_before_cast(site);
  Amax a;
  int64_t saturated = 0;
  QuantisedOperand q;
  if (!e) {
    const std::optional<int> guess = config_.scaling == CastScaling::current ? last_exponent(site) : std::nullopt;
    if (guess) {
      q = cast_per_tensor(f, x32, *guess, true, &saturated, kind, decoded, &a, keep);
      e = exponent_for(a);
      if (*e != *guess) {
        q = QuantisedOperand{};
        std::lock_guard lock(mutex_);
        ++stats_.recasts;
      }
    } else {
      e = exponent_for(amax_of(x32.f32(), x32.numel()));
    }
  }
  if (!q.defined()) q = cast_per_tensor(f, x32, *e, true, &saturated, kind, decoded, &a, keep);
  record(site, a, saturated, site.record && config_.scaling == CastScaling::delayed,
         config_.scaling == CastScaling::current ? e : std::nullopt);
  if (amax_out) *amax_out = a;
  return q;
}

QuantisedOperand Fp8Quantiser::quantise(const Tensor& x, int64_t batch, int64_t rows, int64_t cols,
                                        int contraction_axis, const QuantSite& site, Tensor* decoded) {
  const bool grad = site.role == OperandRole::grad_output;
  if (grad ? !cast_bwd_ : !cast_fwd_)
    throw std::logic_error(std::string("Fp8Quantiser: no ") + (grad ? "backward" : "forward") + " cast configured");
  if (batch * rows * cols != x.numel())
    throw std::invalid_argument("Fp8Quantiser: view does not match the operand " + shape_str(x.shape()));
  const Tensor x32 = x.dtype() == DType::f32 ? x : x.to(DType::f32, MemoryKind::workspace);
  return cast(grad ? bwd_ : fwd_, x32, batch, rows, cols, contraction_axis, false, site, MemoryKind::activation,
              nullptr, decoded);
}

autograd::OperandQuantiser::Weight Fp8Quantiser::quantise_weight(const autograd::Parameter& p, int contraction_axis,
                                                                 const QuantSite& site) {
  if (!cast_fwd_) throw std::logic_error("Fp8Quantiser: no forward cast configured");
  if (p.value.ndim() != 2) throw std::invalid_argument("Fp8Quantiser: weight " + p.name + " is not 2-D");
  auto& slot = derived_cache().slot<CachedWeight>(&p, this, kFp8Weight);
  CachedWeight& w = slot.value;
  bool fresh = w.operand.defined() && slot.version == p.version && w.axis == contraction_axis;
  if (fresh && config_.scaling == CastScaling::delayed) {
    const SiteState s = site_state(site);
    fresh = s.has_exponent == w.has_exponent && (!s.has_exponent || s.exponent == w.exponent);
  }
  if (!fresh) {
    const Tensor x32 = p.value.dtype() == DType::f32 ? p.value : p.value.to(DType::f32, MemoryKind::workspace);
    const SiteState before = site_state(site);
    w.operand = cast(fwd_, x32, 1, p.value.dim(0), p.value.dim(1), contraction_axis, true, site, MemoryKind::workspace,
                     &w.amax, &w.decoded);
    slot.version = p.version;
    w.axis = contraction_axis;
    w.has_exponent = before.has_exponent;
    w.exponent = before.exponent;
    ++w.generation;
    std::lock_guard lock(mutex_);
    ++stats_.weight_casts;
  } else if (site.record && config_.scaling == CastScaling::delayed && !w.amax.nonfinite) {
    // A cached weight still belongs to this step's history (e.g. cast in
    // the unrecorded first forward of a checkpointed segment).
    std::lock_guard lock(mutex_);
    SiteState& s = sites_[{site.key, site.key ? 0 : site.ordinal, static_cast<int>(site.role)}];
    s.step_amax = s.seen_this_step ? std::max(s.step_amax, w.amax.value) : w.amax.value;
    s.seen_this_step = true;
  }
  return Weight{w.operand, w.decoded, &w, w.generation};
}

Tensor Fp8Quantiser::decode(const QuantisedOperand& q) const { return decode_to_bf16(q, MemoryKind::workspace); }

void Fp8Quantiser::end_step() {
  std::lock_guard lock(mutex_);
  for (auto& kv : sites_) {
    SiteState& s = kv.second;
    if (!s.seen_this_step) continue;
    s.history.push_back(s.step_amax);
    if (static_cast<int64_t>(s.history.size()) > config_.amax_history)
      s.history.erase(s.history.begin(), s.history.end() - config_.amax_history);
    const float m = *std::max_element(s.history.begin(), s.history.end());
    const formats::Format& f = std::get<2>(kv.first) == static_cast<int>(OperandRole::grad_output) ? bwd_ : fwd_;
    s.exponent = per_tensor_exponent(f.max(), m, config_.margin);
    s.has_exponent = true;
    s.seen_this_step = false;
    s.step_amax = 0;
  }
}

}  // namespace mantissa::quant
