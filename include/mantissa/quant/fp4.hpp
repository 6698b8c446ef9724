// The FP4 operand quantiser behind the nvfp4 and mxfp4 recipes: each product
// of a block linear layer gets its own 4-bit block cast, blocked along that
// product's contraction (formats/fp4.hpp):
//
//   forward  y = x W         x: 1 x b blocks along K; W: b x b blocks (2-D)
//                            or b x 1 along K
//   dgrad    dx = dy W^T     dy: 1 x b along N; W: the same 2-D decode, or
//                            1 x b along N (1-D)
//   wgrad    dW = x^T dy     x and dy: b x 1 along M, both rotated first by
//                            the same 16-row Hadamard transform (hadamard.hpp)
//   with rht_dgrad, dgrad's dy and W are rotated along N too (Tseng et al.
//   rotate both backward products' operands).
//
// Each rotation runs inside its cast (Fp4Spec::rht_signs), in cache.
// (b = 16 for NVFP4, 32 for MXFP4). Rounding: nearest-even for the forward
// inputs; stochastic for the output gradients (fp4_sr = gradients) or for
// every backward-product input (fp4_sr = backward; MXFP4 blocks then scaled
// by 3/4 so stochastic rounding never clips). Each operand is decoded
// exactly into bf16 (E2M1 x E4M3 has 6 significant bits) and multiplied by
// the bf16 GEMM with fp32 accumulation; the per-tensor fp32 scale goes to its
// alpha.
//
// Layers kept in bf16: products of two activations (attention), the listed
// residual blocks (by autograd::Parameter::block) and, with "head", the
// readout; everything from fp4_until x the run's steps on.
//
// Storage: what the backward pass keeps of a cast activation is its Wgrad
// cast as codes two per byte plus one scale byte per block
// (autograd::PackedOperand, 0.5 + 1/b bytes a value instead of the bf16
// decode's 2), decoded to bf16 when the Wgrad product runs: the same values,
// so the same losses. pack_saved = false keeps the decode instead.
//
// Draws: the stochastic-rounding seed of a cast is a hash of (rht_seed, the
// step's update count, the cast's index within the step), so a run replays
// exactly, resumed or not, on any CPU.
//
// Defined in src/quant/fp4_quantiser.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mantissa/autograd/policy.hpp"
#include "mantissa/formats/fp4.hpp"
#include "mantissa/quant/hadamard.hpp"

namespace mantissa::quant {

enum class RhtMode : uint8_t { none, random, deterministic };

struct Fp4Config {
  formats::Fp4Scale format = formats::Fp4Scale::nvfp4;
  bool forward = true;
  bool backward = true;
  bool weight_2d = true;
  RhtMode rht = RhtMode::random;
  bool sr_gradients = true;
  bool sr_operands = false;  // weights and activations of the backward products too
  bool rht_dgrad = false;    // the Hadamard transform on dgrad's inputs too (along N)
  bool pack_saved = true;    // saved Wgrad operands as packed codes + block scales
  std::vector<int> bf16_blocks;  // negative: from the end (needs n_blocks)
  bool bf16_head = true;
  int n_blocks = 0;
  double until = 1.0;
  uint64_t seed = 0;
};

struct Fp4Stats {
  int64_t casts = 0;             // FP4 casts done
  int64_t bf16_casts = 0;        // operands passed through in bf16
  int64_t nonfinite_casts = 0;   // tensors holding inf/NaN (passed through)
  int64_t weight_casts = 0;      // weight casts computed (cache misses)
};

class Fp4Quantiser final : public autograd::OperandQuantiser {
 public:
  explicit Fp4Quantiser(Fp4Config config);
  ~Fp4Quantiser() override;

  bool casts_forward() const override { return true; }
  bool casts_backward() const override { return config_.backward; }
  bool separate_wgrad() const override { return true; }
  bool rotates(const autograd::QuantSite& site) const override {
    return site.role == autograd::OperandRole::grad_output && (site.wgrad || config_.rht_dgrad) &&
           config_.rht != RhtMode::none;
  }
  autograd::QuantisedOperand quantise(const Tensor& x, int64_t batch, int64_t rows, int64_t cols,
                                      int contraction_axis, const autograd::QuantSite& site, Tensor* decoded) override;
  Weight quantise_weight(const autograd::Parameter& p, int contraction_axis, const autograd::QuantSite& site) override;
  Tensor decode(const autograd::QuantisedOperand& q) const override;
  void set_progress(int64_t updates, int64_t total) override;

  const Fp4Config& config() const { return config_; }
  Fp4Stats stats() const;
  // Whether the products of this parameter run in FP4 now.
  bool active(const autograd::Parameter& p) const;

  // A weight's cast, cached in the derived-value cache (tensor/derived_cache.hpp).
  struct CachedWeight;

 private:
  struct Packed;
  int64_t block() const { return config_.format == formats::Fp4Scale::nvfp4 ? 16 : 32; }
  // x [rows, cols] cast with tiles (tr, tc), rotated first along rht_axis (0: not);
  // the exact bf16 decode, scale() = tensor scale. With `packed`, the codes and
  // block scales go there instead and the result only carries the scale
  // (a tensor holding inf/NaN keeps its pass-through decode, packed left null).
  // With `tiles`, also the block scales (QuantSite::report_tiles).
  using Tiles = std::shared_ptr<const autograd::TileScales>;
  Tensor cast(const float* x, int64_t rows, int64_t cols, int64_t tr, int64_t tc, bool stochastic, MemoryKind kind,
              int rht_axis = 0, std::shared_ptr<const autograd::PackedOperand>* packed = nullptr,
              Tiles* tiles = nullptr);
  // Along `axis` (1 rows, 2 cols) in b x 1 / 1 x b tiles; rht: rotate 16-groups along it first.
  Tensor cast_along(const Tensor& x32, int64_t rows, int64_t cols, int axis, bool stochastic, bool rht,
                    MemoryKind kind, std::shared_ptr<const autograd::PackedOperand>* packed = nullptr,
                    Tiles* tiles = nullptr);
  uint64_t next_seed();

  Fp4Config config_;
  RhtSigns signs_;
  mutable std::mutex mutex_;
  int64_t updates_ = 0, total_ = 0;
  uint64_t calls_ = 0;
  Fp4Stats stats_;
};

}  // namespace mantissa::quant
