// FP16 casts of matrix-product operands at a given power-of-two scale, for
// the scale-propagation recipes (scalify-fp16, scalify-fp16-master).
//
// code = round-to-nearest-even(x x 2^-E) in IEEE binary16, codes.scale() =
// 2^E, so value = code x 2^E. Finite values beyond fp16's max saturate to
// +-65504 and are counted; inf and NaN stay inf and NaN (a non-finite
// gradient must reach the step's finiteness check, not be hidden).
//
// Exactness: x x 2^-E in fp32 is exact (a power of two) except below fp32's
// normal range (< 2^-126), where the result rounds to fp16 zero whatever the
// lost bits were (fp16's smallest subnormal is 2^-24). Every fp16 value is an
// fp32 value, so the f32 decode is exact; fp16 has 11 significant bits, more
// than bf16's 8, which is why the decode is f32 and not bf16. A product of
// two fp16 values has at most 22 significant bits and is exact in fp32.
#pragma once

#include <cstdint>

#include "mantissa/autograd/policy.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/quant/fp8.hpp"

namespace mantissa::scalify {

// True if f has the layout of IEEE binary16 (the "fp16" preset).
bool is_fp16_format(const formats::Format& f);

// x (f32) cast to fp16 codes (DType::f16, shape of x) at scale 2^exponent.
// `saturated` receives the number of finite values clipped to +-max; with
// `decoded` not null it also receives the f32 decode (codes' values without
// the scale, scale 1), and with `amax` not null x's largest magnitude and
// whether it holds inf/NaN, all in the same pass over x.
autograd::QuantisedOperand cast_fp16(const Tensor& x, int exponent, int64_t* saturated = nullptr,
                                     MemoryKind kind = MemoryKind::activation, Tensor* decoded = nullptr,
                                     MemoryKind decoded_kind = MemoryKind::workspace, quant::Amax* amax = nullptr);

// The f32 values of fp16 codes (the per-tensor scale not applied, scale 1).
Tensor decode_fp16_to_f32(const autograd::QuantisedOperand& q, MemoryKind kind = MemoryKind::workspace);

}  // namespace mantissa::scalify
