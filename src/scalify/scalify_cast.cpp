// FP16 casts at power-of-two scales and their exact f32 decode. See
// scalify/scalify_cast.hpp.
#include "mantissa/scalify/scalify_cast.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/scaled_copy.hpp"
#include "mantissa/cpu/profile.hpp"

namespace mantissa::scalify {
namespace {

// Elements per formats::quantize call: the scaled copy stays in L1.
constexpr int64_t kChunk = 4096;

const formats::Format& fp16() {
  static const formats::Format f = formats::preset("fp16");
  return f;
}

}  // namespace

bool is_fp16_format(const formats::Format& f) {
  const formats::Format& h = fp16();
  return f.kind == h.kind && f.exponent_bits == h.exponent_bits && f.mantissa_bits == h.mantissa_bits &&
         f.bias == h.bias && f.has_inf == h.has_inf && f.nan == h.nan && f.negative_zero == h.negative_zero &&
         f.subnormals == h.subnormals && f.is_signed == h.is_signed;
}

autograd::QuantisedOperand cast_fp16(const Tensor& x, int exponent, int64_t* saturated, MemoryKind kind,
                                     Tensor* decoded, MemoryKind decoded_kind, quant::Amax* amax) {
  const cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  if (x.dtype() != DType::f32)
    throw std::invalid_argument(std::string("cast_fp16: input must be f32, got ") + dtype_name(x.dtype()));
  if (exponent < -126 || exponent > 126)
    throw std::invalid_argument("cast_fp16: scale exponent " + std::to_string(exponent) + " is outside [-126, 126]");
  autograd::QuantisedOperand q;
  q.codes = Tensor::empty(x.shape(), DType::f16, kind);
  q.codes.set_scale(std::ldexp(1.0f, exponent));
  float* dec = nullptr;
  if (decoded) {
    *decoded = Tensor::empty(x.shape(), DType::f32, decoded_kind);
    dec = decoded->f32();
  }
  const float mult = std::ldexp(1.0f, -exponent);
  const float fmax = static_cast<float>(fp16().max());
  const float* src = x.f32();
  auto* codes = q.codes.data<uint16_t>();
  const int64_t n = x.numel();
  int64_t clipped = 0;
  float big = 0;  // largest magnitude (inf if any value is inf)
  int bad = 0;    // any inf/NaN
#pragma omp parallel for reduction(+ : clipped) reduction(max : big) reduction(| : bad) schedule(static) if (n > 4 * kChunk)
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t len = std::min(kChunk, n - c0);
    float tmp[kChunk];
    const formats::ScanTotals t = formats::scaled_copy(src + c0, tmp, static_cast<size_t>(len), mult, fmax);
    // Saturation is done here, on finite inputs only, so that inf and NaN
    // pass through the encoder unchanged (its saturate option would also
    // clip inf). Rare: only a scale that underestimates the tensor needs it.
    if (t.beyond > 0)
      for (int64_t i = 0; i < len; ++i)
        if (std::isfinite(src[c0 + i]) && !(std::fabs(tmp[i]) <= fmax)) tmp[i] = std::copysign(fmax, src[c0 + i]);
    clipped += t.beyond;
    big = t.amax > big ? t.amax : big;
    bad |= static_cast<int>(t.nonfinite);
    formats::quantize(fp16(), tmp, codes + c0, static_cast<size_t>(len));
    if (dec) formats::dequantize(fp16(), codes + c0, dec + c0, static_cast<size_t>(len));
  }
  if (saturated) *saturated = clipped;
  if (amax) *amax = {big, bad != 0};
  return q;
}

Tensor decode_fp16_to_f32(const autograd::QuantisedOperand& q, MemoryKind kind) {
  const cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  if (q.codes.dtype() != DType::f16)
    throw std::invalid_argument(std::string("decode_fp16_to_f32: codes must be f16, got ") + dtype_name(q.codes.dtype()));
  if (q.blocks) throw std::invalid_argument("decode_fp16_to_f32: fp16 casts are per tensor, got block scales");
  Tensor out = Tensor::empty(q.codes.shape(), DType::f32, kind);
  const auto* codes = q.codes.data<uint16_t>();
  float* o = out.f32();
  const int64_t n = q.codes.numel();
#pragma omp parallel for schedule(static) if (n > 4 * kChunk)
  for (int64_t c0 = 0; c0 < n; c0 += kChunk)
    formats::dequantize(fp16(), codes + c0, o + c0, static_cast<size_t>(std::min(kChunk, n - c0)));
  return out;
}

}  // namespace mantissa::scalify
