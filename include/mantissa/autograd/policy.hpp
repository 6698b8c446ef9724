// Precision policy and scale hooks consulted by every op, so that recipes
// (recipe/recipe.hpp) and scaling rules (unit scaling, scale propagation, FP8 casts)
// wrap ops without rewriting the models.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mantissa/tensor/tensor.hpp"

namespace mantissa::autograd {

struct Parameter;

// ---- operand casts at the matrix products (FP8 recipes) ------------------------------------
// Which operand of a product is being cast. Forward inputs (activation and
// weight) take the forward format, output gradients the backward format.
enum class OperandRole : uint8_t { activation, weight, grad_output };

// Where a cast happens, so a quantiser can keep per-site state (delayed
// scaling's amax history). `key` is stable across steps and across
// activation-checkpoint replays: the Parameter the product multiplies by
// (linear's weight; the parameter operand of matmul), or null for products of
// two activations, which are told apart by `ordinal` (their call order within
// the pass, OpContext::quant_calls).
struct QuantSite {
  const void* key = nullptr;
  uint64_t ordinal = 0;
  OperandRole role = OperandRole::activation;
  // False for casts that must not update per-site state: passes without
  // gradient (evaluation, the first forward of a checkpointed segment).
  bool record = true;
  // False when the caller multiplies the decode at once and keeps nothing
  // (output gradients): a quantiser may then skip writing the codes and
  // return codes of shape [0] that carry only the scale (and block scales).
  bool keep_codes = true;
  // True for the cast of an output gradient for the weight-gradient product
  // (asked only of quantisers whose separate_wgrad() is true).
  bool wgrad = false;
  // Diagnostics (inspect/): a block-scaled quantiser that keeps no
  // BlockScales attaches its tiles' scales (QuantisedOperand::tiles).
  bool report_tiles = false;
};

// Power-of-two scales of the tiles of an operand viewed as [batch, rows,
// cols]: tile (b, i, j) covers rows [i*tile_rows, ...) and cols
// [j*tile_cols, ...) of batch b (edge tiles are shorter). value = decoded
// code x 2^exponent. Kept next to the 1-byte codes for the backward pass.
struct BlockScales {
  int64_t batch = 1, rows = 0, cols = 0;
  int64_t tile_rows = 1, tile_cols = 1;
  std::vector<int8_t> exponents;  // [batch, ceil(rows/tile_rows), ceil(cols/tile_cols)]
  int64_t tiles_down() const { return (rows + tile_rows - 1) / tile_rows; }
  int64_t tiles_across() const { return (cols + tile_cols - 1) / tile_cols; }
};

// An operand a quantiser keeps for the backward product in a form of its own
// (FP4: codes two per byte and block scales, in counted activation memory);
// OperandQuantiser::decode() turns it into what the GEMM multiplies.
struct PackedOperand {
  virtual ~PackedOperand() = default;
  virtual size_t bytes() const = 0;
};

// The scales of a block-scaled cast's tiles, for diagnostics, when the
// operand carries no BlockScales (FP4 casts, whose decode folds them in):
// tiles as in BlockScales, scale[t] the factor of tile t's elements (the
// per-tensor scale, codes.scale(), apart); floor and ceiling the smallest and
// largest factor the scale format holds (the clamps of the scale rule);
// element: the elements' format (a formats preset name).
struct TileScales {
  int64_t batch = 1, rows = 0, cols = 0;
  int64_t tile_rows = 1, tile_cols = 1;
  std::vector<float> scale;
  double floor = 0, ceiling = 0;
  const char* element = "";
};

// A cast operand: real low-precision codes (1-byte dtype e4m3fn, e5m2, ...)
// in the source's shape. value = decode(code) x codes.scale() x block scale
// (blocks: null for per-tensor scaling).
struct QuantisedOperand {
  Tensor codes;
  std::shared_ptr<const BlockScales> blocks;
  // Set by quantisers that cast an operand apart for the backward product
  // that reuses it (FP4 recipes: blocks along that product's contraction,
  // Hadamard-rotated for the weight gradient): that operand's exact decode,
  // its per-tensor scale in backward.scale(). The backward product then
  // multiplies it instead of the forward decode.
  Tensor backward;
  // When set, the backward operand kept packed: `backward` is then an empty
  // tensor carrying only its scale, and decode() unpacks it.
  std::shared_ptr<const PackedOperand> packed;
  // Set only when asked (QuantSite::report_tiles); not part of the operand's storage.
  std::shared_ptr<const TileScales> tiles;
  bool defined() const { return codes.defined(); }
  size_t bytes() const {
    return codes.bytes() + backward.bytes() + (blocks ? blocks->exponents.size() : 0) + (packed ? packed->bytes() : 0);
  }
};

// Casts matrix-product operands. Implemented above autograd (quant/fp8.hpp:
// unit, current, delayed, MX and blockwise scaling); ops_matmul calls it
// through this interface only. One instance serves one model (it holds
// per-site state) and is shared by copies of the PrecisionPolicy.
class OperandQuantiser {
 public:
  virtual ~OperandQuantiser() = default;
  virtual bool casts_forward() const = 0;   // activations and weights are cast
  virtual bool casts_backward() const = 0;  // output gradients are cast
  // x (fp32 or 16-bit) viewed as [batch, rows, cols] with the product's
  // contraction along `contraction_axis` (1 = rows, 2 = cols): block
  // scalings tile along it. With `decoded` not null it also receives
  // decode(result), computed in the same pass over x (the forward operand and
  // the output gradient are multiplied right away; only the codes are kept).
  virtual QuantisedOperand quantise(const Tensor& x, int64_t batch, int64_t rows, int64_t cols,
                                    int contraction_axis, const QuantSite& site, Tensor* decoded) = 0;
  // A weight [rows, cols] with its exact decode, cached until its
  // Parameter::version (or, for delayed scaling, its scale) changes;
  // (cache_key, cache_version) identify the decode for the GEMM's
  // pre-packing cache.
  struct Weight {
    QuantisedOperand operand;
    Tensor decoded;
    const void* cache_key = nullptr;
    int cache_version = 0;
  };
  virtual Weight quantise_weight(const Parameter& p, int contraction_axis, const QuantSite& site) = 0;
  // The values the GEMM multiplies (of q.packed when set): the codes with block scales folded in,
  // exactly, in bf16 (every FP8 value times a power of two within bf16's
  // range is a bf16 value) or in f32 for formats bf16 cannot hold (fp16);
  // the per-tensor scale is left to the GEMM's alpha.
  virtual Tensor decode(const QuantisedOperand& q) const = 0;
  // Once per optimizer step, after the update (or the skip): delayed scaling
  // rolls its amax history and computes the next step's scales.
  virtual void end_step() {}
  // True: the weight-gradient product casts the output gradient again, with
  // QuantSite::wgrad set and the contraction along its rows.
  virtual bool separate_wgrad() const { return false; }
  // True when the cast of `site` rotates its input first (a Hadamard
  // transform), so that its decode does not approximate the input itself.
  virtual bool rotates(const QuantSite& /*site*/) const { return false; }
  // Before each optimizer step: updates done so far and the run's total
  // (0 if unknown), for recipes that change precision late in training.
  virtual void set_progress(int64_t /*updates*/, int64_t /*total*/) {}
};

// Op classes as in the mixed-precision literature: matrix products in
// `matmul` (fp32 accumulation always), activations kept for the backward pass
// stored as `saved`; norms, softmax, losses and reductions always in fp32.
// With a `quantiser`, matrix-product operands are cast by it and multiplied
// through the bf16 path whatever `matmul` says.
// The exponents 1-byte saved activations used at each save site (the
// OpContext::save_calls order of a pass), kept across passes: a save encodes
// with its site's last exponent and encodes again only when the tensor's own
// amax calls for another, so the usual save reads x once instead of twice
// (amax scan, then encode) and gives the same codes. Shared by copies of the
// policy; touched only by the thread running the pass.
struct SavedScaleHints {
  std::vector<int> exponent;  // by site; kNone: no save there yet
  int64_t saves = 0;          // hinted saves
  int64_t reencodes = 0;      // of which encoded twice (the exponent moved)
  static constexpr int kNone = -1000;
};

// Diagnostics (inspect/): sees every 1-byte save, its source (x less
// row_mean per row of `cols` when row_mean is set) and the codes kept, after
// the encode. `site` is the save's OpContext::save_calls order in its pass.
// Must only read: the pass's numerics are the same with or without it.
class SaveObserver {
 public:
  virtual ~SaveObserver() = default;
  virtual void saved(uint64_t site, const Tensor& x, const float* row_mean, int64_t cols, const Tensor& codes) = 0;
  // Every 16-bit save (Tape::save rounding an f32 x to `copy`, bf16 or f16,
  // under any policy whose saves are not f32); `site` is its
  // OpContext::copy_saves order in the pass.
  virtual void saved_copy(uint64_t /*site*/, const Tensor& /*x*/, const Tensor& /*copy*/) {}
};

struct PrecisionPolicy {
  DType matmul = DType::f32;  // f32, bf16 or f16
  // f32, bf16, f16, or a 1-byte FP8 dtype (e4m3fn, e5m2, ...): the ops that
  // read their saved tensors through the Tape keep codes with a per-tensor
  // power-of-two scale (Tape::save_compact), any other save is bf16.
  // Matrix products keep the quantiser's codes or their matmul-dtype operand.
  DType saved = DType::f32;
  std::shared_ptr<OperandQuantiser> quantiser;  // null: no casts
  // false: models run their readout product uncast (ReadoutScope, tape.hpp).
  bool cast_readout = true;
  // Set by amp for 1-byte `saved`; null: every save scans its amax first.
  std::shared_ptr<SavedScaleHints> saved_hints;
  std::shared_ptr<SaveObserver> save_observer;  // null: no diagnostics
};

// Unit-scaling style multipliers of one op: the forward output is multiplied
// by `forward`, every input gradient by `backward` (and the weight gradient by
// `weight` for ops with weights). The default leaves the op unscaled.
struct OpScales {
  float forward = 1.0f;
  float backward = 1.0f;
  float weight = 1.0f;
};

}  // namespace mantissa::autograd
