// `mantissa inspect`: why a low-precision run drifts from fp32, cast site by
// cast site and step by step.
//
// Cast sites. A probe wraps the model's autograd::OperandQuantiser (any of
// them: FP8 per-tensor and block scalings, Scalify, later FP4 ones: the
// probe sees only the interface) and observes activation saves, 1-byte and
// 16-bit (autograd::SaveObserver). It reads; the run's numbers are bit for bit
// those of an uninspected run. A site is named by the model op whose output
// the cast feeds (the name the model reports through its observer, e.g.
// "h1.attn.qkv"; else the parameter's name, else "product<k>") and a role:
// "forward X", "forward W", "backward dY", "saved". Parameter gradients
// rounded into a low-precision gradient format are the site "<param> grad",
// working weights rounded from fp32 masters "<param> weight", Adam moments
// kept in a low-precision format "<param> exp_avg" / "<param> exp_avg_sq".
//
// What a cast's figures are measured against (CastTally):
//   * matrix-product operands and saves: the cast's own fp32 input (the value
//     the run had before rounding), so the figure is this cast's error alone;
//   * parameter gradients: the pre-rounding fp32 sum of the step;
//   * working weights: the fp32 master they were rounded from;
//   * Adam moments: the step's fp32 moment before it is rounded for storage.
// The error accumulated through the network is measured against the fp32
// shadow (the same model in fp32 on the same batches, re-synchronised to the
// run's weights every K steps): per parameter the cosine and relative norm
// error of the gradient and of the update, and the loss gap.
//
// Definitions, over the values looked at (all of them, or an even stride of
// at most `max_values` per cast; non-finite references are left out):
//   SQNR dB   = 10 log10(sum r^2 / sum (r - q)^2) (inf when exact; -inf when
//               a value overflowed to inf)
//   underflow = #(r != 0 and q == 0) / #(r != 0)
//   saturated = #(|r| > (max + half the spacing below max) x s) / n, where
//               s is the element's scale (the tensor's, times its block's):
//               values that round beyond the format's largest value at the
//               scale used, clipped to max or overflowed to inf
//   amax = max |r|; scale_log2 = log2 of the per-tensor scale (0 for block
//   scalings, whose scales are per tile); exponent histogram of floor(log2|r|).
// Block-scaled casts (MX, blockwise FP8, NVFP4, MXFP4) add, over whole tiles
// (every k-th, so that about max_values values are read; tiles holding only
// zeros left out): the exponents floor(log2 s) of the tiles' scales s
// (min, median, max), the fractions of tiles whose s is the scale format's
// smallest or largest (the scale rule clamped it: E8M0 2^-127 / 2^127, NVFP4's
// E4M3 2^-9 / 448) and the lowest SQNR of one tile.
#pragma once

#include <array>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mantissa/autograd/policy.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/optim/optimizer.hpp"
#include "mantissa/train/config.hpp"

namespace mantissa::inspect {

// ---- one site's figures ---------------------------------------------------------------------
struct CastTally {
  static constexpr int kExpLo = -64, kExpBins = 96;  // exponents [-64, 31], clamped
  double signal = 0, noise = 0;    // sum r^2, sum (r - q)^2 (noise inf after an overflow)
  int64_t values = 0;              // looked at (finite references)
  int64_t nonzero = 0, flushed = 0, saturated = 0;
  double amax = 0;
  int scale_log2 = 0;
  int casts = 0;
  std::array<int64_t, kExpBins> exp_hist{};
  // Block-scaled casts (tally_tiles): the tiles looked at that hold a
  // nonzero finite value; floor(log2 scale) -> tiles; tiles whose scale is
  // the scale format's smallest / largest; the lowest SQNR of one tile.
  int64_t blocks = 0, blocks_at_floor = 0, blocks_at_ceiling = 0;
  std::map<int, int64_t> block_exp;
  double worst_block_sqnr_db = std::numeric_limits<double>::infinity();

  double sqnr_db() const;
  double underflow() const { return nonzero ? static_cast<double>(flushed) / static_cast<double>(nonzero) : 0; }
  double saturation() const { return values ? static_cast<double>(saturated) / static_cast<double>(values) : 0; }
  // The block scales' exponents: smallest, median (the lower one of an even
  // count), largest; 0 without blocks.
  int block_exp_min() const { return block_exp.empty() ? 0 : block_exp.begin()->first; }
  int block_exp_max() const { return block_exp.empty() ? 0 : block_exp.rbegin()->first; }
  int block_exp_median() const;
  double floor_fraction() const { return blocks ? static_cast<double>(blocks_at_floor) / static_cast<double>(blocks) : 0; }
  double ceiling_fraction() const {
    return blocks ? static_cast<double>(blocks_at_ceiling) / static_cast<double>(blocks) : 0;
  }
};

// Adds ref[i] against q[i] (i = 0, stride, 2 stride, ... < n) to t. limit:
// the largest magnitude that rounds within the format at element i's scale
// (the saturation threshold above x scale); one value for all
// (limit_per_elem null) or one per element.
void tally(CastTally& t, const float* ref, const float* q, int64_t n, int64_t stride, double limit,
           const float* limit_per_elem = nullptr);
// The stride that looks at about max_values of n (1 when max_values <= 0).
int64_t sample_stride(int64_t n, int64_t max_values);
// Adds the tiles of a block-scaled cast to t's block figures: every k-th
// tile of s (k = sample_stride(tiles, max_values / tile size)), all of its
// elements, ref(i) against q(i) at flat index i of s's [batch, rows, cols]
// view. Tiles whose finite references are all zero are left out.
void tally_tiles(CastTally& t, const autograd::TileScales& s, const std::function<double(int64_t)>& ref,
                 const std::function<double(int64_t)>& q, int64_t max_values);
// The same over tensors: ref (f32 or bf16) against q x q_scale.
void tally_tiles(CastTally& t, const autograd::TileScales& s, const Tensor& ref, const Tensor& q, float q_scale,
                 int64_t max_values);

// ---- the probe ------------------------------------------------------------------------------
struct SiteInfo {
  std::string name;    // "h1.attn.qkv backward dY"
  std::string kind;    // "matmul", "saved", "grad", "weight"
  std::string format;  // "e5m2", "fp16", ...
  double min_subnormal = 0;  // of the format, 0 if unknown
  double max = 0;
};

class Probe;
// Wraps a model's precision policy with a probe (its quantiser and its
// saves, when they are not f32); no-op parts where the policy has none.
// Returns the probe.
std::shared_ptr<Probe> attach_probe(nn::Model& model, int64_t max_values);

class Probe {
 public:
  explicit Probe(nn::Model& model, int64_t max_values);
  // Whether the next passes are looked at (off: the wrapper only forwards).
  void set_active(bool on);
  bool active() const { return active_; }
  // The model's observer that names sites (set while active).
  nn::Model::Observer observer();
  // Parameter gradients about to be rounded into `format` x loss_scale:
  // tallies them as "<param> grad" sites (before the rounding; reads only).
  void tally_gradients(const std::vector<autograd::Parameter*>& params, const formats::Format& format, double loss_scale);
  // Working weights rounded from fp32 masters (amp::MasterWeights::masters(),
  // by name): "<param> weight" sites, the master as reference.
  void tally_weights(const std::vector<autograd::Parameter*>& params, const std::map<std::string, const float*>& masters,
                     const formats::Format& working);
  // A low-precision Adam moment rounded after the update: the site
  // "<param> exp_avg" / "<param> exp_avg_sq" (kind "optimizer state"), the
  // unrounded fp32 moment as reference, saturation relative to the moment's scale.
  void tally_state(const optim::Adam::StateCast& c);
  // This step's sites, in the order first seen, and a fresh start.
  std::vector<std::pair<SiteInfo, CastTally>> take();

  // Internal, for the quantiser wrapper and the save observer.
  // Tallies one cast into its site's figures and returns them.
  CastTally& add(const void* key, uint64_t ordinal, int role, const std::string& fallback, const std::string& format,
                 const float* ref, const float* q, int64_t n, double limit, const float* limit_per_elem, float scale);
  int64_t max_values() const { return max_values_; }

 private:
  struct Key {
    const void* key;
    uint64_t ordinal;
    int role;
    auto operator<=>(const Key&) const = default;
  };
  nn::Model& model_;
  int64_t max_values_;
  bool active_ = false;
  std::map<const void*, std::string> param_names_;
  struct Entry {
    Key key;
    std::string fallback;  // name when the model names no op for the site
    SiteInfo info;
    CastTally tally;
  };
  std::map<Key, std::string> names_;   // op names from the observer, kept across steps
  std::vector<Key> pending_;           // sites cast since the last named op output
  std::map<Key, size_t> index_;
  std::vector<Entry> entries_;
};

// ---- verdicts (shared by inspect and train --watch) ---------------------------------------
struct VerdictOptions {
  double sqnr_floor_db = 10;      // a site below this is flagged
  double underflow = 0.25;        // a site flushing more of its nonzero values than this is flagged
  int saturation_steps = 3;       // saturated in this many sampled steps in a row
  double loss_gap = 0.02;         // relative loss gap to the shadow, over this in...
  int loss_gap_steps = 3;         // ...this many sampled steps in a row, and growing
  double update_cosine = 0.5;     // a parameter's update cosine below this in...
  int update_cosine_steps = 3;    // ...this many sampled steps in a row
  // Throws std::invalid_argument naming the first threshold that is not finite
  // or a step count below 1 (either would turn its warning off silently).
  void validate() const;
};

struct ParamCompare {
  std::string name;
  double grad_cos = 1, grad_rel_err = 0, update_cos = 1, update_rel_err = 0;
};

struct Warning {
  int64_t step = 0;
  std::string site;
  std::string message;
};

class Verdicts {
 public:
  explicit Verdicts(VerdictOptions o = {}) : o_(o) { o_.validate(); }
  // One sampled step. Returns the warnings that fired first at this step.
  std::vector<Warning> feed(int64_t step, const std::vector<std::pair<SiteInfo, CastTally>>& sites,
                            std::optional<double> loss_gap, const std::vector<ParamCompare>& params);
  const std::vector<Warning>& warnings() const { return warnings_; }

  struct Ranked {
    std::string site, kind, format;
    double sqnr_db = 0;         // median over sampled steps
    double min_sqnr_db = 0;
    double underflow = 0;       // mean
    double saturation = 0;      // mean
    double amax = 0;            // max
    int scale_log2 = 0;         // last
    double min_subnormal = 0, max = 0;
    // The share of the site's values or signal lost: the largest of the
    // underflow and saturation fractions and the noise-to-signal ratio
    // 10^(-SQNR/10). A cast that flushes most of a gradient's values loses
    // little of its energy (the large values carry it) but the direction
    // those values encode, so an energy measure alone ranks it too low.
    double lost = 0;
    std::string cause;
    // Block-scaled sites: the tiles of all sampled steps pooled (tally_tiles);
    // tiles.blocks == 0 for per-tensor scalings.
    CastTally tiles;
  };
  // Sites, worst first: most lost, then lowest median SQNR.
  std::vector<Ranked> ranking() const;

 private:
  struct History {
    SiteInfo info;
    std::vector<double> sqnr, underflow, saturation;
    double amax = 0;
    int scale_log2 = 0;
    CastTally tiles;
    int saturated_run = 0;
    bool warned_sqnr = false, warned_sat = false, warned_underflow = false;
  };
  VerdictOptions o_;
  std::map<std::string, History> sites_;
  std::vector<std::string> order_;
  std::vector<double> gaps_;
  int gap_run_ = 0;
  bool warned_gap_ = false;
  std::map<std::string, int> cos_run_;
  std::map<std::string, bool> warned_cos_;
  std::vector<Warning> warnings_;
};
std::string cause_text(const Verdicts::Ranked& r);
std::string ranking_table(const std::vector<Verdicts::Ranked>& r, size_t rows);

// ---- the shadow comparison ---------------------------------------------------------------
struct InspectOptions {
  train::TrainConfig config;         // the run (recipe, model, data, steps)
  int64_t sync_every = 1;     // re-synchronise the shadow every K steps; 0: free-running
  int64_t sample_every = 1;   // look at every k-th step
  int64_t max_values = 1 << 16;
  VerdictOptions verdicts;
  std::string out;            // output directory ("" : nothing written)
  bool print = true;          // warnings and the table on stdout
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0, shadow_loss = 0, seconds = 0, shadow_seconds = 0;
  bool sampled = false, skipped = false;
  std::vector<std::pair<SiteInfo, CastTally>> sites;
  std::vector<ParamCompare> params;
};

struct InspectResult {
  std::string recipe, shadow_recipe;
  std::vector<StepRecord> steps;
  std::vector<Verdicts::Ranked> ranking;
  std::vector<Warning> warnings;
  double step_seconds = 0;         // mean, the inspected run's step (probe included)
  double shadow_step_seconds = 0;  // mean, the shadow's forward/backward/update
};

// c with the settings inspect has no use for (saving, metrics, evaluation,
// logging, stopping early) at their defaults; inspect refuses them otherwise.
train::TrainConfig without_unused_settings(train::TrainConfig c);
// Throws std::invalid_argument for bad options or an unusable --out.
InspectResult inspect(const InspectOptions& o);
// --out: creates DIR, or reuses one that holds kInspectMarker (or is empty);
// refuses any other existing path.
inline constexpr const char* kInspectMarker = ".mantissa-inspect";
void prepare_out_dir(const std::string& dir);
void write_inspection(const std::string& dir, const InspectResult& r);

}  // namespace mantissa::inspect

namespace mantissa::inspect {

// The Adam whose moments are kept in a low-precision format, behind any
// wrapper (IndependentDecay); null for other optimizers and fp32 moments.
optim::Adam* low_precision_adam(optim::Optimizer* opt);

// `mantissa train --watch [k]`: probes the cast sites of every k-th step
// (with `opt`, also its low-precision Adam moments) and prints a warning line
// when a verdict fires (SQNR floor, repeated saturation); no shadow, so no
// loss gap or update cosine. Hook before_step / after_step into RunOptions.
// Values --watch looks at per cast: fractions and SQNR of 4096 evenly
// strided values are within about a percent of the whole tensor's, at a
// cost that stays small beside the step's.
inline constexpr int64_t kWatchValues = 4096;
class Watch {
 public:
  Watch(nn::Model& model, int64_t every, int64_t max_values, VerdictOptions o, FILE* log,
        optim::Optimizer* opt = nullptr);
  void before_step(int64_t step);
  void after_step(int64_t step);
  const Verdicts& verdicts() const { return verdicts_; }

 private:
  std::shared_ptr<Probe> probe_;
  optim::Adam* adam_;
  int64_t every_;
  Verdicts verdicts_;
  FILE* log_;
};

}  // namespace mantissa::inspect
