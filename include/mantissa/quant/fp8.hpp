// FP8 casts of matrix-product operands as production systems scale them:
// unit (scale 1), per-tensor current and delayed scaling
// (Transformer Engine), MX blocks (OCP, E8M0 scales) and DeepSeek-V3 style
// blockwise scaling. Operands become real 1-byte tensors (autograd's
// QuantisedOperand); the product then runs exactly through the bf16 path:
//
//   * codes decode to bf16 exactly (every e4m3/e5m2 value is a bf16 value),
//     and a product of two FP8 values is exact in fp32, so a bf16 GEMM with
//     fp32 accumulation computes the FP8 product up to accumulation order;
//   * per-tensor scales are powers of two kept in Tensor::scale() and applied
//     by the GEMM's alpha (its epilogue);
//   * block scales (MX, blockwise) are powers of two folded into the bf16
//     decode: decode(code) x 2^e is exact in bf16 while it stays inside bf16's
//     normal range (always, for the exponents produced here: |e| <= 127 and
//     FP8 magnitudes in [2^-17, 2^16]; only results below 2^-126 could lose
//     bits, which the tile's own amax rules out for all but values 2^20 times
//     smaller than it). Folding instead of scaling per K-block in the GEMM
//     means the backward products can reuse the forward codes whatever the
//     block orientation (Transformer Engine re-quantises column-wise).
//
// Speed: a cast reads x once (formats::ScaledCast: scale, round, decode and
// scan in registers). Tiles along a row (1 x n) get their amaxes 16 tiles at
// a time just before those are cast, still in L1; taller tiles go one band of
// tile rows at a time: column maxima, the tiles' exponents, then the band's
// rows with per-tile (or per-column) factors while the band is in cache.
// Current scaling needs x's amax before rounding; it casts with the site's
// previous exponent and checks it against the amax the same pass finds,
// redoing the cast only when the exponent moved (Fp8Stats::recasts).
//
// Scale convention: a tensor is cast as code = round(x x 2^-E) and
// represents code x 2^E (Tensor::scale() = 2^E). Per-tensor scaling picks
// E = -(floor(log2(max / amax)) - margin), i.e. Transformer Engine's
// scale = fp8_max / amax rounded down to a power of two, so amax x 2^-E <= max.
//
// Overflow: casts saturate (a value above the format's max becomes +-max)
// and are counted (Fp8Stats). Only delayed scaling can saturate a finite
// value (its scale comes from past amaxes): the step's own amax enters the
// history, so the next step's scale covers it. A non-finite input (inf/NaN
// from an earlier overflow) is cast without saturation so it stays
// non-finite: the gradients become non-finite and amp::Amp skips the step
// (LossScaler::unscale_and_check), so no NaN reaches the weights; a
// non-finite amax never enters a history.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "mantissa/autograd/policy.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/mx.hpp"
#include "mantissa/quant/cast_scaling.hpp"

namespace mantissa::quant {


// ---- scale rules (exact integer arithmetic on exponents; src/quant/fp8_cast.cpp) -------
// Per-tensor (current, delayed): E with amax x 2^-E <= max and E minimal,
// plus margin; amax 0 or non-finite gives 0. E is clamped to [-126, 126].
int per_tensor_exponent(double format_max, double amax, int margin = 0);
// MX (OCP): floor(log2(amax)) - emax(element), clamped to E8M0's [-127, 127];
// amax 0 gives -127. Elements above max after scaling saturate.
int mx_exponent(const formats::Format& element, double amax);
// Blockwise: smallest E with amax x 2^-E <= max (never saturates), clamped to
// [-127, 127]; amax 0 gives 0.
int blockwise_exponent(double format_max, double amax);

// Largest |x| of a float array and whether any element is inf or NaN.
struct Amax {
  float value = 0;
  bool nonfinite = false;
};
Amax amax_of(const float* x, int64_t n);

// ---- casts (src/quant/fp8_cast.cpp) ------------------------------------------------------
// The 1-byte tensor dtype of a cast format; throws std::invalid_argument
// naming the formats that have one (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz).
DType cast_dtype(const formats::Format& f);

// x (fp32) cast as round-to-nearest-even(x x 2^-E), codes.scale() = 2^E, in
// one pass over x that can also produce:
//   * `decoded`: the exact bf16 decode of the codes (what the GEMM multiplies),
//   * `amax`: x's largest magnitude and whether it holds inf/NaN,
//   * `saturated`: the number of finite values clipped to +-max.
// Finite values saturate unless `saturate` is false; a tensor holding inf/NaN
// is cast without saturation either way, so the non-finite values survive.
// keep_codes false (with `decoded`): the codes are not written and q.codes
// is an empty [0] tensor carrying only the scale (an output gradient, whose
// decode is multiplied at once and never kept).
autograd::QuantisedOperand cast_per_tensor(const formats::Format& f, const Tensor& x, int exponent, bool saturate,
                                           int64_t* saturated = nullptr, MemoryKind kind = MemoryKind::activation,
                                           Tensor* decoded = nullptr, Amax* amax = nullptr, bool keep_codes = true);

// x (fp32) viewed as [batch, rows, cols], one power-of-two scale per tile of
// tile_rows x tile_cols (edge tiles shorter), E from `rule` (mx_exponent or
// blockwise_exponent) on the tile's amax; codes.scale() = 1. A tile holding
// inf/NaN gets E = 0 and the whole tensor is cast without saturation (so the
// non-finite values survive); `report` receives the totals and `decoded` (if
// given) the exact bf16 decode with the block scales folded in; keep_codes
// as for cast_per_tensor (the block exponents are kept either way).
struct CastReport {
  int64_t saturated = 0;
  Amax amax;
};
autograd::QuantisedOperand cast_blocks(const formats::Format& f, const Tensor& x, int64_t batch, int64_t rows,
                                       int64_t cols, int64_t tile_rows, int64_t tile_cols, CastScaling rule,
                                       CastReport* report = nullptr, MemoryKind kind = MemoryKind::activation,
                                       Tensor* decoded = nullptr, bool keep_codes = true);

// bf16 values of the codes with block scales folded in (per-tensor scale not
// applied). Exact, see above.
Tensor decode_to_bf16(const autograd::QuantisedOperand& q, MemoryKind kind = MemoryKind::workspace);
// fp32 values including every scale (for tests and diagnostics).
std::vector<float> dequantised_values(const autograd::QuantisedOperand& q);

// ---- the quantiser (src/quant/fp8_quantiser.cpp) -----------------------------------------
struct Fp8Config {
  CastScaling scaling = CastScaling::unit;
  std::optional<formats::Format> forward_format;   // nullopt = forward operands are not cast
  std::optional<formats::Format> backward_format;  // nullopt = output gradients are not cast
  int64_t amax_history = 1024;  // delayed
  int margin = 0;               // current, delayed
  int64_t mx_block = 32;        // mx: elements per block along the contraction dim
  // mx: floor = OCP's exponent rule (mx_exponent), ceil = blockwise_exponent's
  // (the block never clips).
  formats::ScaleRounding mx_scale_rounding = formats::ScaleRounding::floor;
  int64_t tile = 128;           // blockwise: 1 x tile activation/gradient tiles, tile x tile weight blocks
};

struct Fp8Stats {
  int64_t casts = 0;             // tensors cast
  int64_t saturated_casts = 0;   // casts that clipped at least one finite value
  int64_t saturated_values = 0;  // finite values clipped to +-max
  int64_t nonfinite_casts = 0;   // casts of tensors holding inf/NaN
  int64_t weight_casts = 0;      // weight casts actually computed (cache misses)
  int64_t recasts = 0;           // current scaling: casts redone because the site's exponent moved
};

class Fp8Quantiser final : public autograd::OperandQuantiser {
 public:
  // Throws std::invalid_argument naming a format without a 1-byte dtype.
  explicit Fp8Quantiser(Fp8Config config);
  ~Fp8Quantiser() override;

  bool casts_forward() const override { return cast_fwd_; }
  bool casts_backward() const override { return cast_bwd_; }
  autograd::QuantisedOperand quantise(const Tensor& x, int64_t batch, int64_t rows, int64_t cols,
                                      int contraction_axis, const autograd::QuantSite& site, Tensor* decoded) override;
  Weight quantise_weight(const autograd::Parameter& p, int contraction_axis, const autograd::QuantSite& site) override;
  Tensor decode(const autograd::QuantisedOperand& q) const override;
  void end_step() override;

  const Fp8Config& config() const { return config_; }
  Fp8Stats stats() const;
  // Delayed scaling's state of one site: the amax history, oldest first
  // (at most amax_history entries) and the exponent casts use now (unset
  // until the site's first end_step: the first step scales from the current
  // amax). Empty history for unknown sites.
  struct SiteState {
    std::vector<float> history;
    float step_amax = 0;       // max over this step's casts (finite ones)
    bool seen_this_step = false;
    bool has_exponent = false;
    int exponent = 0;
    // Current scaling: the exponent of the site's last cast, which its next
    // cast tries first (see Fp8Quantiser::cast).
    bool has_last = false;
    int last_exponent = 0;
  };
  SiteState site_state(const autograd::QuantSite& site) const;
  size_t site_count() const;
  // A weight's cast, cached in the derived-value cache (tensor/derived_cache.hpp).
  struct CachedWeight;

 private:
  using SiteKey = std::tuple<const void*, uint64_t, int>;
  std::optional<int> exponent_before_cast(const autograd::QuantSite& site) const;
  std::optional<int> last_exponent(const autograd::QuantSite& site) const;
  void record(const autograd::QuantSite& site, const Amax& a, int64_t saturated, bool record_amax,
              std::optional<int> exponent = std::nullopt);
  autograd::QuantisedOperand cast(const formats::Format& f, const Tensor& x32, int64_t batch, int64_t rows,
                                  int64_t cols, int contraction_axis, bool weight, const autograd::QuantSite& site,
                                  MemoryKind kind, Amax* amax_out, Tensor* decoded);

  Fp8Config config_;
  formats::Format fwd_, bwd_;
  bool cast_fwd_ = false, cast_bwd_ = false;
  mutable std::mutex mutex_;
  std::map<SiteKey, SiteState> sites_;
  Fp8Stats stats_;
};

}  // namespace mantissa::quant
