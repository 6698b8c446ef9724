// The `propagate` operand quantiser: FP8 or FP16 casts of
// the GPT's matrix-product operands at scales that come from scale propagation
// (propagate.hpp's scale_rule functions applied along the block structure the model declares
// with autograd::Parameter::input / through, from the parameters' own power-of-two
// scales), not from each tensor's amax. In GPT-2 terms:
//
//   weight W                 s(W) = pow2_down(rms(W))   (a scaled array's scale, per version)
//   c_attn / c_fc / head in  layer-norm rule: s(gain), joined with s(bias) by the add rule
//   attn.c_proj in           attention keeps qkv's scale: add_bias(s_ln1 s(W_attn) r(C), s(b_attn))
//   mlp.c_proj in            GELU keeps c_fc's scale:    add_bias(s_ln2 s(W_fc) r(C), s(b_fc))
//   head grad_output         dynamic rescale (the loss gradient enters the scaled world)
//   attn/mlp.c_proj grad_out dynamic rescale: the residual gradient after a
//                            layer-norm backward (Scalify's rescale point; 2 per layer)
//   mlp.c_fc grad_out        GELU backward keeps: s(grad_out mlp.c_proj) s(W_mlp.c_proj) r(C)
//   attn.c_attn grad_out     attention backward: s(grad_out attn.c_proj) s(W_attn.c_proj) r(C)
//                            x max(1, s_qkv^2) (dV keeps dO's scale, dQ/dK carry s_qkv^2)
// with r(K) = pow2_round(sqrt K) and zero tensors "any scale". The Llama and
// BERT declare the same structure with separate q, k, v products (attention
// rule on v, backward rules per operand) and the SwiGLU silu(gate) * up
// (Parameter::query / key / gate); their table is in docs/scale-propagation.md.
// Operands whose
// weight declares no input (and products of two activations) are
// rescaled dynamically and counted as such. Casts saturate and count
// saturated values (a propagated scale that underestimates shows up there).
//
// Speed: every cast reads its fp32 input once (quant::cast_per_tensor or
// cast_fp16: scale, round, decode and scan in one pass). Parameter scales
// s(P) are computed once per parameter version. A dynamic rescale first
// casts with the site's last exponent and checks it against the amax the
// same pass finds, casting again only when the exponent moved
// (ScalifyStats::recasts).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "mantissa/autograd/policy.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/quant/fp8.hpp"
#include "mantissa/scalify/scaled.hpp"

namespace mantissa::scalify {

// Cast formats: "fp16" (codes are real 2-byte f16 tensors, decoded exactly
// to f32 for the product) or a format with a 1-byte dtype (e4m3fn, e5m2,
// e4m3fnuz, e5m2fnuz; decoded exactly to bf16). Forward and backward may differ.
struct ScalifyOptions {
  std::optional<formats::Format> forward_format = formats::preset("e4m3fn");  // activations and weights (nullopt = not cast)
  std::optional<formats::Format> backward_format = formats::preset("e5m2");   // output gradients (nullopt = not cast)
  Norm rescale_norm = Norm::max;          // dynamic rescales: scale = pow2_round(norm)
  ScaleRounding rounding = ScaleRounding::down;
};

struct ScalifyStats {
  int64_t casts = 0;
  int64_t dynamic_rescales = 0;       // all steps
  int64_t saturated_values = 0;       // finite values clipped to +-max
  int64_t last_step_rescales = 0;     // dynamic rescales in the last completed step
  int64_t recasts = 0;                // dynamic casts redone because the site's exponent moved
  int64_t layers = 0;                 // residual blocks seen
  double rescales_per_layer() const { return layers ? static_cast<double>(last_step_rescales) / layers : 0.0; }
};

class ScalifyQuantiser final : public autograd::OperandQuantiser {
 public:
  // params: the model's parameters; throws std::invalid_argument
  // naming a format that is neither fp16 nor one with a 1-byte dtype.
  ScalifyQuantiser(ScalifyOptions options, std::vector<autograd::Parameter*> params);
  ~ScalifyQuantiser() override;  // frees its weight casts and scales
  bool casts_forward() const override { return cast_fwd_; }
  bool casts_backward() const override { return cast_bwd_; }
  autograd::QuantisedOperand quantise(const Tensor& x, int64_t batch, int64_t rows, int64_t cols,
                                      int contraction_axis, const autograd::QuantSite& site, Tensor* decoded) override;
  Weight quantise_weight(const autograd::Parameter& p, int contraction_axis, const autograd::QuantSite& site) override;
  Tensor decode(const autograd::QuantisedOperand& q) const override;
  void end_step() override;

  ScalifyStats stats() const;
  // The scale exponent the last cast of this site used (for tests): role x parameter name.
  std::map<std::string, int> last_exponents() const;

  // A weight's cast and a parameter's scale s(P): this quantiser's entries
  // in the derived-value cache (tensor/derived_cache.hpp), refreshed per
  // parameter version (every parameter changes once per step, and each
  // scale enters several operands' propagated scales).
  struct CachedWeight {
    int axis = 0;
    autograd::QuantisedOperand operand;
    Tensor decoded;
    int generation = 0;
  };

 private:
  // x32 cast to f (fp16 or a 1-byte format) at scale 2^exponent in one pass
  // over x32; `decoded` (if not null) receives decode() of the result,
  // `amax` (if not null) x32's largest magnitude and whether it holds inf/NaN;
  // keep_codes false: FP8 codes left unwritten (cast_per_tensor).
  autograd::QuantisedOperand cast(const formats::Format& f, const Tensor& x32, int exponent, int64_t* saturated,
                                  MemoryKind kind, Tensor* decoded, quant::Amax* amax = nullptr, bool keep_codes = true) const;
  // A dynamic rescale: x32 cast at the exponent of its own norm, which is
  // written to *exponent; `key` names the site (its last exponent is tried first).
  autograd::QuantisedOperand cast_dynamic(const formats::Format& f, const Tensor& x32, const std::string& key,
                                          int* exponent, int64_t* saturated, Tensor* decoded, bool keep_codes);
  int norm_exponent(const Tensor& x32) const;  // exponent of the rescale norm of x32 (0: zero or non-finite)
  int amax_exponent(const quant::Amax& a) const;      // the same for the max norm, from x32's amax
  double param_scale(const autograd::Parameter* p) const;  // s(P); 0 when P is zero (any scale), null or not the model's
  // The propagated exponent of the operand of the product with weight p (null:
  // two activations); nullopt when the site has none (dynamic rescale).
  std::optional<int> propagated_exponent(const autograd::Parameter* p, autograd::OperandRole role);

  ScalifyOptions options_;
  formats::Format fwd_, bwd_;
  bool cast_fwd_ = false, cast_bwd_ = false;
  std::unordered_set<const autograd::Parameter*> known_;  // the model's parameters
  // A linear weight -> the linear weight whose input is its output (Parameter::input).
  std::unordered_map<const autograd::Parameter*, const autograd::Parameter*> consumer_;
  mutable std::mutex mutex_;
  // This step's grad_output exponents of linears fed by another linear.
  std::unordered_map<const autograd::Parameter*, int> grad_exponent_;
  std::map<std::string, int> last_;
  mutable std::mutex scale_mutex_;  // guards the cached scales' slots
  ScalifyStats stats_;
  int64_t step_rescales_ = 0;
};

// The factory amp::precision_policy calls for cast_scaling == propagate.
std::shared_ptr<autograd::OperandQuantiser> make_scalify_quantiser(const ScalifyOptions& options,
                                                                  std::vector<autograd::Parameter*> params);

}  // namespace mantissa::scalify
