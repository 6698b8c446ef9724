#include "mantissa/amp/master_weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "mantissa/formats/convert.hpp"
#include "mantissa/cpu/profile.hpp"

namespace mantissa::amp {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

MasterWeights::MasterWeights(std::vector<autograd::Parameter*> params, const recipe::Recipe& recipe, uint64_t seed)
    : params_(std::move(params)),
      format_(recipe.weight_format.value()),
      rounding_(recipe.weight_rounding),
      norms_fp32_(recipe.norms_fp32),
      active_(recipe::exact_dtype(recipe.weight_format.value()) != DType::f32),
      // A master copy in the working format itself (Scalify's FP16 master
      // weights) is the working weights: updated in place, then rounded.
      has_master_(active_ && recipe::master_copy_format(recipe) != nullptr &&
                  !recipe::same_format(*recipe::master_copy_format(recipe), format_)),
      seed_(seed) {
  const formats::Format* master = recipe::master_copy_format(recipe);
  if (master != nullptr && recipe::exact_dtype(*master) != DType::f32 && !recipe::same_format(*master, format_))
    throw std::invalid_argument("master_format '" + recipe.master_format.name() +
                                "' is not supported (valid: fp32, none, or the weight_format '" +
                                recipe.weight_format.name() + "')");
  master_.resize(params_.size());
}

bool MasterWeights::rounds(size_t i) const { return !(norms_fp32_ && autograd::is_norm(params_[i]->role)); }

void MasterWeights::round_into_value(size_t i, uint64_t round_seed) {
  const cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  autograd::Parameter& p = *params_[i];
  formats::RoundOptions opt;
  // Overflow saturates: a weight beyond the format's range is a divergence
  // the loss will show, not a NaN planted in the weights.
  opt.saturate = true;
  if (rounding_ == recipe::WeightRounding::stochastic) {
    opt.mode = formats::Round::stochastic;
    opt.seed = round_seed;
  }
  const int64_t first = owned_.empty() ? 0 : owned_[i].begin;
  const float* src = has_master_ ? master_[i].f32() : p.value.f32() + first;
  float* dst = p.value.f32() + first;
  const auto n = static_cast<size_t>(owned_.empty() ? p.value.numel() : owned_[i].size());
  ++p.version;
  const auto max = static_cast<float>(format_.max());
  if (opt.mode != formats::Round::nearest_even || format_.kind != formats::Kind::floating || !std::isfinite(max)) {
    formats::fake_quantize(format_, src, dst, n, opt);
    return;
  }
  // Nearest-even never rounds a value <= max above max, so clamping to
  // +-max (NaN stays NaN) and rounding without saturation gives the
  // saturating result: the plain rounding has the fast (hardware) kernels.
  opt.saturate = false;
  constexpr size_t kBlock = size_t{1} << 15;  // stays in L2 between the clamp and the rounding
#pragma omp parallel for schedule(static) if (n > 4 * kBlock)
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(kBlock, n - b);
#pragma omp simd
    for (size_t j = b; j < b + m; ++j) dst[j] = src[j] > max ? max : (src[j] < -max ? -max : src[j]);
    formats::fake_quantize(format_, dst + b, dst + b, m, opt);
  }
}

void MasterWeights::initialise() {
  if (!active_) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!rounds(i)) continue;
    if (has_master_) master_[i] = params_[i]->value.clone(MemoryKind::parameter);
    // Initial rounding is nearest-even so that it does not depend on a step.
    const recipe::WeightRounding saved = rounding_;
    rounding_ = recipe::WeightRounding::nearest;
    round_into_value(i, 0);
    rounding_ = saved;
  }
}

// Sharded, the master holds the owned elements, which start at `first`.
void MasterWeights::before_update() {
  if (!has_master_) return;
  for (size_t i = 0; i < params_.size(); ++i)
    if (master_[i].defined() && master_[i].numel() > 0)
      std::memcpy(params_[i]->value.f32() + (owned_.empty() ? 0 : owned_[i].begin), master_[i].raw(), master_[i].bytes());
}

void MasterWeights::after_update(int64_t step) {
  if (!active_) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!rounds(i)) continue;
    if (has_master_ && master_[i].numel() > 0)
      std::memcpy(master_[i].raw(), params_[i]->value.f32() + (owned_.empty() ? 0 : owned_[i].begin), master_[i].bytes());
    const uint64_t round_seed = splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(step) * 0x10001ull + i));
    round_into_value(i, round_seed);
  }
}

std::map<std::string, const float*> MasterWeights::masters() const {
  std::map<std::string, const float*> m;
  for (size_t i = 0; i < params_.size(); ++i)
    if (master_[i].defined()) m[params_[i]->name] = master_[i].f32();
  return m;
}

std::map<std::string, Tensor> MasterWeights::master_tensors() const {
  std::map<std::string, Tensor> m;
  for (size_t i = 0; i < params_.size(); ++i)
    if (master_[i].defined()) m[params_[i]->name] = master_[i];
  return m;
}

size_t MasterWeights::bytes() const {
  size_t b = 0;
  for (const Tensor& t : master_)
    if (t.defined()) b += t.bytes();
  return b;
}

void MasterWeights::shard(const optim::OwnedRanges& owned) {
  if (owned.size() != params_.size()) throw std::logic_error("MasterWeights::shard: one range per parameter expected");
  if (active_ && rounding_ == recipe::WeightRounding::stochastic)
    throw std::invalid_argument("stochastic weight rounding cannot be sharded (each element's random draw is indexed "
                                "from the start of the whole tensor): use --weight-rounding nearest");
  owned_ = owned;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!master_[i].defined()) continue;
    Tensor mine = Tensor::empty({owned[i].size()}, DType::f32, MemoryKind::parameter);
    if (owned[i].size() > 0)
      std::memcpy(mine.raw(), master_[i].f32() + owned[i].begin, static_cast<size_t>(owned[i].size()) * sizeof(float));
    master_[i] = mine;
  }
}

void MasterWeights::load_master(const std::string& name, const float* data, int64_t n) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i]->name != name) continue;
    if (!master_[i].defined()) throw std::invalid_argument("checkpoint has a master copy of '" + name + "' but this recipe keeps none");
    const int64_t whole = params_[i]->value.numel();
    if (whole != n)
      throw std::invalid_argument("master copy of '" + name + "' has " + std::to_string(n) + " values, expected " +
                                  std::to_string(whole));
    const int64_t first = owned_.empty() ? 0 : owned_[i].begin;
    if (master_[i].numel() > 0)
      std::memcpy(master_[i].raw(), data + first, master_[i].bytes());
    return;
  }
  throw std::invalid_argument("checkpoint has a master copy of unknown parameter '" + name + "'");
}

}  // namespace mantissa::amp
