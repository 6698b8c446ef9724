// The inspector's probe: a wrapper around any autograd::OperandQuantiser and
// an autograd::SaveObserver that tally each cast against its own input while
// active (CastTally, inspect.hpp). Both only read what the cast produced; the
// wrapped quantiser decides everything, so the run is unchanged.
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string_view>

#include "mantissa/autograd/tape.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/inspect/inspect.hpp"
#include "inspect/inspect_read.hpp"

namespace mantissa::inspect {
namespace {

constexpr int kSavedRole = 3, kGradRole = 4, kWeightRole = 5, kExpAvgRole = 6, kExpAvgSqRole = 7, kCopyRole = 8;
bool per_parameter(int role) { return role >= kGradRole && role != kCopyRole; }
bool saved_role(int role) { return role == kSavedRole || role == kCopyRole; }

const char* role_name(int role) {
  switch (role) {
    case 0: return "forward X";
    case 1: return "forward W";
    case 2: return "backward dY";
    case kSavedRole:
    case kCopyRole: return "saved";
    case kWeightRole: return "weight";
    case kExpAvgRole: return "exp_avg";
    case kExpAvgSqRole: return "exp_avg_sq";
    default: return "grad";
  }
}

// The preset of that name, or null.
const formats::Format* format_named(const std::string& name) {
  try {
    return &formats::preset(name);
  } catch (const std::invalid_argument&) {
    return nullptr;
  }
}

// The format of a tensor's dtype, or null (no preset for it).
const formats::Format* format_of(DType t) { return t == DType::i32 ? nullptr : format_named(dtype_format_name(t)); }

// The largest magnitude that rounds to nearest no higher than the format's
// max: max plus half the spacing below it. Beyond it a value overflows (to
// +-max or inf) instead of rounding: "saturated". (NVFP4's E4M3 block scale,
// rounded down, leaves a block's largest value up to 1/16 above 6 x scale,
// where it would round to 6 anyway: not counted.)
double clip_limit(const formats::Format* f) {
  if (!f) return std::numeric_limits<double>::infinity();
  return f->max() + std::ldexp(1.0, f->max_exponent() - f->mantissa_bits - 1);
}

// Elements 0, stride, 2 stride, ... of t as f32, times `scale`: the probe
// reads only the values it looks at.
std::vector<float> values_f32(const Tensor& t, float scale, int64_t stride) {
  std::vector<float> v;
  v.reserve(static_cast<size_t>((t.numel() + stride - 1) / stride));
  detail::with_reader(t, scale, [&](auto at) {
    for (int64_t i = 0; i < t.numel(); i += stride) v.push_back(static_cast<float>(at(i)));
  });
  return v;
}

// An operand's block scales as TileScales: the FP8 BlockScales (powers of
// two clamped to [2^-127, 2^127], elements in the codes' format) or the
// quantiser's own report (FP4); null for per-tensor scalings.
std::shared_ptr<const autograd::TileScales> tiles_of(const autograd::QuantisedOperand& q, const formats::Format* f) {
  if (q.tiles) return q.tiles;
  if (!q.blocks) return nullptr;
  const autograd::BlockScales& b = *q.blocks;
  auto t = std::make_shared<autograd::TileScales>();
  t->batch = b.batch;
  t->rows = b.rows;
  t->cols = b.cols;
  t->tile_rows = b.tile_rows;
  t->tile_cols = b.tile_cols;
  t->floor = 0x1p-127;
  t->ceiling = 0x1p127;
  t->element = f ? f->name.c_str() : "";
  t->scale.reserve(b.exponents.size());
  for (int8_t e : b.exponents) t->scale.push_back(std::ldexp(1.0f, e));
  return t;
}

// For elements 0, stride, ...: the largest magnitude its tile can hold
// (the element format's clip limit x the tile's scale x the per-tensor scale).
std::vector<float> tile_limits(const autograd::TileScales& b, double limit, float scale, int64_t stride) {
  std::vector<float> lim;
  const int64_t down = (b.rows + b.tile_rows - 1) / b.tile_rows, across = (b.cols + b.tile_cols - 1) / b.tile_cols;
  const int64_t n = b.batch * b.rows * b.cols;
  for (int64_t i = 0; i < n; i += stride) {
    const int64_t c = i % b.cols, r = (i / b.cols) % b.rows, m = i / (b.cols * b.rows);
    const float s = b.scale[static_cast<size_t>((m * down + r / b.tile_rows) * across + c / b.tile_cols)];
    lim.push_back(static_cast<float>(limit * s * scale));
  }
  return lim;
}

class ProbeQuantiser final : public autograd::OperandQuantiser {
 public:
  ProbeQuantiser(std::shared_ptr<autograd::OperandQuantiser> inner, Probe& probe)
      : inner_(std::move(inner)), probe_(probe) {}
  bool casts_forward() const override { return inner_->casts_forward(); }
  bool casts_backward() const override { return inner_->casts_backward(); }
  Tensor decode(const autograd::QuantisedOperand& q) const override { return inner_->decode(q); }
  void end_step() override { inner_->end_step(); }
  bool separate_wgrad() const override { return inner_->separate_wgrad(); }
  void set_progress(int64_t updates, int64_t total) override { inner_->set_progress(updates, total); }

  bool rotates(const autograd::QuantSite& site) const override { return inner_->rotates(site); }

  // The weight-gradient product's own cast of an output gradient, and any
  // cast that rotates its input first (FP4's Hadamard transforms: x is not
  // its reference), are not looked at.
  autograd::QuantisedOperand quantise(const Tensor& x, int64_t batch, int64_t rows, int64_t cols, int axis,
                                      const autograd::QuantSite& site, Tensor* decoded) override {
    if (!probe_.active() || site.wgrad || inner_->rotates(site))
      return inner_->quantise(x, batch, rows, cols, axis, site, decoded);
    Tensor local;
    autograd::QuantSite asked = site;
    asked.report_tiles = true;
    autograd::QuantisedOperand q = inner_->quantise(x, batch, rows, cols, axis, asked, decoded ? decoded : &local);
    const Tensor& dec = decoded ? *decoded : local;
    look(x, q, dec.defined() ? dec : inner_->decode(q), site, "product" + std::to_string(site.ordinal));
    return q;
  }

  Weight quantise_weight(const autograd::Parameter& p, int axis, const autograd::QuantSite& site) override {
    if (!probe_.active()) return inner_->quantise_weight(p, axis, site);
    autograd::QuantSite asked = site;
    asked.report_tiles = true;
    Weight w = inner_->quantise_weight(p, axis, asked);
    look(p.value, w.operand, w.decoded.defined() ? w.decoded : inner_->decode(w.operand), site, p.name);
    return w;
  }

 private:
  void look(const Tensor& x, const autograd::QuantisedOperand& q, const Tensor& decoded, const autograd::QuantSite& site,
            const std::string& fallback) {
    const int64_t stride = sample_stride(x.numel(), probe_.max_values());
    const std::vector<float> ref = values_f32(x, 1.0f, stride);
    const float s = q.codes.scale();
    const std::vector<float> got = values_f32(decoded, s, stride);
    const formats::Format* f = format_of(q.codes.dtype());
    std::shared_ptr<const autograd::TileScales> tiles = tiles_of(q, f);
    if (tiles && x.numel() != tiles->batch * tiles->rows * tiles->cols) tiles = nullptr;
    const std::string format = tiles && *tiles->element ? tiles->element : f ? f->name : dtype_name(q.codes.dtype());
    const double limit = clip_limit(format_named(format));
    std::vector<float> lim;
    if (tiles) lim = tile_limits(*tiles, limit, s, stride);
    CastTally& t = probe_.add(site.key, site.ordinal, static_cast<int>(site.role), fallback, format, ref.data(),
                              got.data(), static_cast<int64_t>(ref.size()), limit * s, lim.empty() ? nullptr : lim.data(),
                              q.blocks ? 1.0f : s);
    if (tiles) tally_tiles(t, *tiles, x, decoded, s, probe_.max_values());
  }

  std::shared_ptr<autograd::OperandQuantiser> inner_;
  Probe& probe_;
};

class ProbeSaves final : public autograd::SaveObserver {
 public:
  explicit ProbeSaves(Probe& probe) : probe_(probe) {}
  void saved(uint64_t site, const Tensor& x, const float* row_mean, int64_t cols, const Tensor& codes) override {
    if (!probe_.active()) return;
    const int64_t stride = sample_stride(x.numel(), probe_.max_values());
    std::vector<float> ref = values_f32(x, 1.0f, stride), back;
    const std::array<uint16_t, 256>& table = autograd::Tape::decode_table(codes.dtype());
    for (int64_t i = 0, k = 0; i < x.numel(); i += stride, ++k) {
      if (row_mean) ref[static_cast<size_t>(k)] -= row_mean[i / cols];
      back.push_back(std::bit_cast<float>(static_cast<uint32_t>(table[codes.data<uint8_t>()[i]]) << 16) * codes.scale());
    }
    const formats::Format* f = format_of(codes.dtype());
    probe_.add(nullptr, site, kSavedRole, "save" + std::to_string(site), f ? f->name : dtype_name(codes.dtype()),
               ref.data(), back.data(), static_cast<int64_t>(ref.size()), clip_limit(f) * codes.scale(), nullptr,
               codes.scale());
  }
  // A 16-bit save: x rounded to bf16 or fp16 at scale 1.
  void saved_copy(uint64_t site, const Tensor& x, const Tensor& copy) override {
    if (!probe_.active()) return;
    const int64_t stride = sample_stride(x.numel(), probe_.max_values());
    const std::vector<float> ref = values_f32(x, 1.0f, stride), back = values_f32(copy, 1.0f, stride);
    const formats::Format* f = format_of(copy.dtype());
    probe_.add(nullptr, site, kCopyRole, "copy" + std::to_string(site), f ? f->name : dtype_name(copy.dtype()),
               ref.data(), back.data(), static_cast<int64_t>(ref.size()), clip_limit(f), nullptr, 1.0f);
  }

 private:
  Probe& probe_;
};

}  // namespace

Probe::Probe(nn::Model& model, int64_t max_values) : model_(model), max_values_(max_values) {
  for (autograd::Parameter* p : model.parameters()) param_names_[p] = p->name;
}

std::shared_ptr<Probe> attach_probe(nn::Model& model, int64_t max_values) {
  auto probe = std::make_shared<Probe>(model, max_values);
  autograd::PrecisionPolicy p = model.precision();
  // The policy keeps the probe alive as long as the wrappers that use it.
  if (p.quantiser)
    p.quantiser = std::shared_ptr<autograd::OperandQuantiser>(
        new ProbeQuantiser(p.quantiser, *probe), [probe](autograd::OperandQuantiser* q) { delete q; });
  if (p.saved != DType::f32)
    p.save_observer = std::shared_ptr<autograd::SaveObserver>(new ProbeSaves(*probe),
                                                              [probe](autograd::SaveObserver* o) { delete o; });
  model.set_precision(p);
  return probe;
}

void Probe::set_active(bool on) {
  active_ = on;
  model_.set_observer(on ? observer() : nn::Model::Observer{});
}

nn::Model::Observer Probe::observer() {
  return [this](const std::string& name, bool backward, const Tensor&) {
    if (backward) return;
    for (const Key& k : pending_) names_.emplace(k, name);
    pending_.clear();
  };
}

CastTally& Probe::add(const void* key, uint64_t ordinal, int role, const std::string& fallback, const std::string& format,
                const float* ref, const float* q, int64_t n, double limit, const float* limit_per_elem, float scale) {
  const Key k{key, key ? 0 : ordinal, role};
  const bool per_param = per_parameter(role);
  if (role != static_cast<int>(autograd::OperandRole::grad_output) && !per_param) {
    const Key op{k.key, k.ordinal, saved_role(role) ? role : 0};
    if (!names_.count(op)) pending_.push_back(op);
  }
  auto [it, fresh] = index_.emplace(k, entries_.size());
  if (fresh) {
    Entry e{k, fallback, {}, {}};
    e.info.kind = saved_role(role) ? "saved" : role >= kExpAvgRole ? "optimizer state" : per_param ? role_name(role) : "matmul";
    e.info.format = format;
    try {
      const formats::Format& f = formats::preset(format);
      e.info.min_subnormal = f.min_subnormal();
      e.info.max = f.max();
    } catch (const std::invalid_argument&) {
    }
    entries_.push_back(std::move(e));
  }
  CastTally& t = entries_[it->second].tally;
  tally(t, ref, q, n, sample_stride(n, max_values_), limit, limit_per_elem);
  t.scale_log2 = static_cast<int>(std::lround(std::log2(static_cast<double>(scale))));
  return t;
}

void Probe::tally_gradients(const std::vector<autograd::Parameter*>& params, const formats::Format& f,
                            double loss_scale) {
  const double limit = clip_limit(&f) / loss_scale;
  for (autograd::Parameter* p : params) {
    const int64_t n = p->grad.numel(), stride = sample_stride(n, max_values_);
    std::vector<float> g, r;
    for (int64_t i = 0; i < n; i += stride) g.push_back(p->grad.f32()[i]);
    std::vector<float> q(g.size());
    formats::fake_quantize(f, g.data(), q.data(), g.size());
    r.resize(g.size());
    const float inv = static_cast<float>(1.0 / loss_scale);
    for (size_t i = 0; i < g.size(); ++i) {
      r[i] = g[i] * inv;
      q[i] *= inv;
    }
    // Already subsampled to at most max_values: add() looks at every value.
    add(p, 0, kGradRole, p->name, f.name, r.data(), q.data(), static_cast<int64_t>(g.size()), limit, nullptr,
        static_cast<float>(loss_scale));
  }
}

void Probe::tally_weights(const std::vector<autograd::Parameter*>& params, const std::map<std::string, const float*>& masters,
                          const formats::Format& working) {
  for (autograd::Parameter* p : params) {
    const auto m = masters.find(p->name);
    if (m == masters.end()) continue;  // kept in fp32 (norms, or no master at all)
    const std::vector<float> q = values_f32(p->value, 1.0f, 1);
    add(p, 0, kWeightRole, p->name, working.name, m->second, q.data(), static_cast<int64_t>(q.size()), clip_limit(&working),
        nullptr, 1.0f);
  }
}

void Probe::tally_state(const optim::Adam::StateCast& c) {
  const formats::Format& f = formats::preset(dtype_format_name(c.dtype));
  const bool m = std::string_view(c.moment) == "exp_avg";
  add(c.param, 0, m ? kExpAvgRole : kExpAvgSqRole, c.param->name, f.name, c.ref, c.q, c.n,
      clip_limit(&f) * static_cast<double>(c.scale), nullptr, c.scale);
}

std::vector<std::pair<SiteInfo, CastTally>> Probe::take() {
  std::vector<std::pair<SiteInfo, CastTally>> out;
  out.reserve(entries_.size());
  std::map<std::string, int> seen;  // a name given twice (a 1-byte and a 16-bit save of one op) gets " #2"
  for (Entry& e : entries_) {
    const Key op{e.key.key, e.key.ordinal, saved_role(e.key.role) ? e.key.role : 0};
    const bool per_param = per_parameter(e.key.role);
    auto it = per_param ? names_.end() : names_.find(op);
    std::string base = it != names_.end() ? it->second : e.fallback;
    if (it == names_.end() && e.key.key) {
      auto pn = param_names_.find(e.key.key);
      if (pn != param_names_.end()) base = pn->second;
      if (!per_param && base.size() > 7 && base.ends_with(".weight")) base.resize(base.size() - 7);
    }
    e.info.name = base + " " + role_name(e.key.role);
    if (const int k = ++seen[e.info.name]; k > 1) e.info.name += " #" + std::to_string(k);
    out.emplace_back(e.info, e.tally);
  }
  entries_.clear();
  index_.clear();
  pending_.clear();
  return out;
}

}  // namespace mantissa::inspect
