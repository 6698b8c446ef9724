// The FP4 operand quantiser (quant/fp4.hpp).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "mantissa/autograd/parameter.hpp"
#include "mantissa/cpu/profile.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/quant/fp4.hpp"
#include "mantissa/tensor/derived_cache.hpp"

namespace mantissa::quant {

using autograd::OperandRole;
using autograd::QuantisedOperand;
using autograd::QuantSite;

// A saved operand's codes (two per byte) and block scales, counted as activation memory.
struct Fp4Quantiser::Packed final : autograd::PackedOperand {
  formats::Fp4Spec spec;  // as cast (the rotation already applied: not needed to decode)
  int64_t rows, cols;
  mutable Storage codes, scales;  // mutable: Storage hands out its bytes non-const only
  Packed(const formats::Fp4Spec& s, int64_t r, int64_t c)
      : spec(s), rows(r), cols(c), codes(static_cast<size_t>((r * c + 1) / 2), MemoryKind::activation),
        scales(static_cast<size_t>(formats::fp4_tile_count(s, r, c)), MemoryKind::activation) {
    spec.rht_signs = nullptr;
  }
  size_t bytes() const override { return codes.bytes() + scales.bytes(); }
};

// A weight's cast: this quantiser's entry for the parameter in the
// derived-value cache, refreshed when the parameter's version moves.
struct Fp4Quantiser::CachedWeight {
  int axis = 0;
  bool fp4 = false;
  int generation = 0;
  QuantisedOperand operand;
  Tensor decoded;
};

size_t cached_bytes(const Fp4Quantiser::CachedWeight& w) {
  return (w.operand.defined() ? w.operand.bytes() : 0) + mantissa::cached_bytes(w.decoded);
}

namespace {

const DerivedCache::Kind kFp4Weight{"fp4 weight cast"};

// The output head: the untied readout, or the token table when the head is tied to it.
bool is_head(const autograd::Parameter& p) { return p.role == autograd::Role::readout || p.role == autograd::Role::token_embedding; }

Tensor bf16_copy(const Tensor& x, MemoryKind kind) { return x.to(DType::bf16, kind); }

// An empty [0] tensor carrying only a scale (QuantisedOperand codes not kept).
Tensor scale_only(float s) {
  Tensor t = Tensor::empty({0}, DType::bf16, MemoryKind::workspace);
  t.set_scale(s);
  return t;
}

// The block scales of a cast as factors (E4M3 for NVFP4, E8M0 for MXFP4).
std::shared_ptr<const autograd::TileScales> tile_scales(formats::Fp4Scale format, int64_t rows, int64_t cols,
                                                        int64_t tr, int64_t tc, const std::vector<uint8_t>& codes) {
  auto t = std::make_shared<autograd::TileScales>();
  t->rows = rows;
  t->cols = cols;
  t->tile_rows = tr;
  t->tile_cols = tc;
  t->element = "e2m1fn";
  const bool nv = format == formats::Fp4Scale::nvfp4;
  const formats::Format& e4m3 = formats::preset("e4m3fn");
  t->floor = nv ? 0x1p-9 : 0x1p-127;
  t->ceiling = nv ? 448 : 0x1p127;
  t->scale.reserve(codes.size());
  for (uint8_t c : codes)
    t->scale.push_back(nv ? formats::decode_f32(e4m3, c) : std::ldexp(1.0f, static_cast<int>(c) - 127));
  return t;
}

}  // namespace

Fp4Quantiser::Fp4Quantiser(Fp4Config config)
    : config_(std::move(config)), signs_(rht_signs(config_.seed, config_.rht == RhtMode::random)) {
  if (!(config_.until > 0 && config_.until <= 1)) throw std::invalid_argument("Fp4Quantiser: until must be in (0, 1]");
}

Fp4Quantiser::~Fp4Quantiser() { derived_cache().forget_owner(this); }

Fp4Stats Fp4Quantiser::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Fp4Quantiser::set_progress(int64_t updates, int64_t total) {
  std::lock_guard lock(mutex_);
  updates_ = updates;
  total_ = total;
  calls_ = 0;
}

uint64_t Fp4Quantiser::next_seed() {
  std::lock_guard lock(mutex_);
  const uint64_t call = calls_++;
  return config_.seed * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(updates_) << 24) ^ call;
}

bool Fp4Quantiser::active(const autograd::Parameter& p) const {
  {
    std::lock_guard lock(mutex_);
    if (total_ > 0 && static_cast<double>(updates_) >= config_.until * static_cast<double>(total_)) return false;
  }
  const int b = p.block;
  if (b < 0) return !(config_.bf16_head && is_head(p));
  for (int k : config_.bf16_blocks)
    if (k == b || (k < 0 && config_.n_blocks + k == b)) return false;
  return true;
}

Tensor Fp4Quantiser::cast(const float* x, int64_t rows, int64_t cols, int64_t tr, int64_t tc, bool stochastic,
                          MemoryKind kind, int rht_axis, std::shared_ptr<const autograd::PackedOperand>* packed,
                          Tiles* tiles) {
  const cpu::profile::Scope profile_scope(cpu::profile::Category::fp4_cast);
  formats::Fp4Spec spec;
  spec.scale = config_.format;
  spec.tile_rows = tr;
  spec.tile_cols = tc;
  spec.rounding = stochastic ? formats::Fp4Rounding::stochastic : formats::Fp4Rounding::nearest_even;
  spec.headroom = stochastic && config_.format == formats::Fp4Scale::mxfp4;
  if (stochastic) spec.seed = next_seed();
  if (rht_axis) {
    spec.rht_signs = signs_.data();
    spec.rht_axis = rht_axis;
  }
  Tensor out;
  formats::Fp4Result r;
  if (packed) {
    spec.packed = true;
    auto p = std::make_shared<Packed>(spec, rows, cols);
    r = formats::fp4_cast(spec, x, rows, cols, static_cast<uint8_t*>(p->codes.data()),
                          static_cast<uint8_t*>(p->scales.data()), nullptr);
    if (!r.nonfinite) {
      if (tiles) {
        const auto* sc = static_cast<const uint8_t*>(p->scales.data());
        *tiles = tile_scales(config_.format, rows, cols, tr, tc,
                             std::vector<uint8_t>(sc, sc + formats::fp4_tile_count(spec, rows, cols)));
      }
      *packed = std::move(p);
      out = scale_only(r.tensor_scale);
    }
  }
  if (!out.defined()) {
    spec.packed = false;
    out = Tensor::empty({rows, cols}, DType::bf16, kind);
    std::vector<uint8_t> scales(tiles ? static_cast<size_t>(formats::fp4_tile_count(spec, rows, cols)) : 0);
    r = formats::fp4_cast(spec, x, rows, cols, nullptr, tiles ? scales.data() : nullptr, out.data<uint16_t>());
    out.set_scale(r.tensor_scale);
    if (tiles && !r.nonfinite) *tiles = tile_scales(config_.format, rows, cols, tr, tc, scales);
  }
  std::lock_guard lock(mutex_);
  ++stats_.casts;
  if (r.nonfinite) ++stats_.nonfinite_casts;
  return out;
}

Tensor Fp4Quantiser::cast_along(const Tensor& x32, int64_t rows, int64_t cols, int axis, bool stochastic, bool rht,
                                MemoryKind kind, std::shared_ptr<const autograd::PackedOperand>* packed,
                                Tiles* tiles) {
  const int64_t b = block();
  const bool rotate = rht && config_.rht != RhtMode::none;
  return cast(x32.f32(), rows, cols, axis == 1 ? b : 1, axis == 2 ? b : 1, stochastic, kind, rotate ? axis : 0, packed,
              rotate ? nullptr : tiles);
}

QuantisedOperand Fp4Quantiser::quantise(const Tensor& x, int64_t batch, int64_t rows, int64_t cols,
                                        int contraction_axis, const QuantSite& site, Tensor* decoded) {
  if (batch * rows * cols != x.numel())
    throw std::invalid_argument("Fp4Quantiser: view does not match the operand " + shape_str(x.shape()));
  if (contraction_axis != 1 && contraction_axis != 2)
    throw std::invalid_argument("Fp4Quantiser: contraction_axis must be 1 (rows) or 2 (cols)");
  const bool grad = site.role == OperandRole::grad_output;
  // Products of two activations and bf16 layers: the operand in bf16, kept as such.
  const bool fp4 = site.key && batch == 1 && active(*static_cast<const autograd::Parameter*>(site.key));
  QuantisedOperand q;
  if (!fp4 || (!grad && !config_.forward && !config_.backward)) {
    Tensor b = bf16_copy(x, grad ? MemoryKind::workspace : MemoryKind::activation);
    if (decoded) *decoded = b;
    q.codes = grad ? scale_only(1.0f) : b;
    std::lock_guard lock(mutex_);
    ++stats_.bf16_casts;
    return q;
  }
  const Tensor x32 = x.dtype() == DType::f32 ? x : x.to(DType::f32, MemoryKind::workspace);
  if (grad) {  // dgrad: along N (contraction_axis 2; rotated with rht_dgrad); wgrad: along M, rotated
    Tensor d = cast_along(x32, rows, cols, contraction_axis, config_.sr_gradients, site.wgrad || config_.rht_dgrad,
                          MemoryKind::workspace, nullptr, site.report_tiles ? &q.tiles : nullptr);
    q.codes = scale_only(d.scale());
    if (decoded) *decoded = std::move(d);
    return q;
  }
  // The forward product's operand, and (when gradients will flow) the Wgrad one.
  Tensor f = config_.forward ? cast_along(x32, rows, cols, contraction_axis, false, false, MemoryKind::workspace,
                                          nullptr, site.report_tiles ? &q.tiles : nullptr)
                             : bf16_copy(x, MemoryKind::workspace);
  if (config_.backward && site.record) {
    q.codes = scale_only(f.scale());
    q.backward = cast_along(x32, rows, cols, 3 - contraction_axis, config_.sr_operands, true, MemoryKind::activation,
                            config_.pack_saved ? &q.packed : nullptr);
  } else {
    q.codes = f;  // kept: the backward product reuses the forward decode
  }
  if (decoded) *decoded = std::move(f);
  return q;
}

autograd::OperandQuantiser::Weight Fp4Quantiser::quantise_weight(const autograd::Parameter& p, int contraction_axis,
                                                                 const QuantSite& site) {
  if (p.value.ndim() != 2) throw std::invalid_argument("Fp4Quantiser: weight " + p.name + " is not 2-D");
  auto& slot = derived_cache().slot<CachedWeight>(&p, this, kFp4Weight);
  CachedWeight& w = slot.value;
  const bool fp4 = active(p);
  if (!(w.operand.defined() && slot.version == p.version && w.axis == contraction_axis && w.fp4 == fp4)) {
    const Tensor x32 = p.value.dtype() == DType::f32 ? p.value : p.value.to(DType::f32, MemoryKind::workspace);
    const int64_t rows = p.value.dim(0), cols = p.value.dim(1), b = block();
    w.operand = QuantisedOperand{};
    if (!fp4) {
      w.decoded = bf16_copy(p.value, MemoryKind::workspace);
      w.operand.codes = scale_only(1.0f);
    } else {
      const auto cast_w = [&](int axis, bool stochastic, bool rht, Tiles* tiles) {
        return config_.weight_2d
                   ? cast(x32.f32(), rows, cols, b, b, stochastic, MemoryKind::workspace,
                          rht && config_.rht != RhtMode::none ? axis : 0, nullptr, tiles)
                   : cast_along(x32, rows, cols, axis, stochastic, rht, MemoryKind::workspace, nullptr, tiles);
      };
      Tiles tiles;
      w.decoded = config_.forward ? cast_w(contraction_axis, false, false, site.report_tiles ? &tiles : nullptr)
                                  : bf16_copy(p.value, MemoryKind::workspace);
      w.operand.codes = scale_only(w.decoded.scale());
      // dgrad multiplies its own cast unless it is the forward one (2-D blocks, same rounding, no rotation).
      const bool rotated = config_.rht_dgrad && config_.rht != RhtMode::none;
      if (config_.backward && !(config_.forward && config_.weight_2d && !config_.sr_operands && !rotated))
        w.operand.backward = cast_w(3 - contraction_axis, config_.sr_operands, config_.rht_dgrad, nullptr);
      w.operand.tiles = std::move(tiles);
    }
    slot.version = p.version;
    w.axis = contraction_axis;
    w.fp4 = fp4;
    ++w.generation;
    std::lock_guard lock(mutex_);
    ++stats_.weight_casts;
  }
  return Weight{w.operand, w.decoded, &w, w.generation};
}

Tensor Fp4Quantiser::decode(const QuantisedOperand& q) const {
  if (q.packed) {
    const cpu::profile::Scope profile_scope(cpu::profile::Category::fp4_cast);
    const auto* p = dynamic_cast<const Packed*>(q.packed.get());
    if (!p) throw std::logic_error("Fp4Quantiser::decode: the packed operand is not an FP4 one");
    Tensor out = Tensor::empty({p->rows, p->cols}, DType::bf16, MemoryKind::workspace);
    formats::fp4_decode(p->spec, static_cast<const uint8_t*>(p->codes.data()),
                        static_cast<const uint8_t*>(p->scales.data()), p->rows, p->cols, out.data<uint16_t>());
    out.set_scale(q.backward.scale());
    return out;
  }
  if (q.backward.defined()) return q.backward;
  if (q.codes.dtype() != DType::bf16 || q.codes.numel() == 0)
    throw std::logic_error("Fp4Quantiser::decode: the operand keeps no decode");
  return q.codes;
}

}  // namespace mantissa::quant
