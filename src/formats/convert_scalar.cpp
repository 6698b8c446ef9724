// The scalar bulk path (any x86-64 CPU) and the plan builder shared by every
// kernel. The scalar path is the reference encoder of round.cpp in a loop.
#include <cmath>
#include <cstring>
#include <limits>

#include "formats/convert_plan.hpp"
#include "formats/layout_internal.hpp"

namespace mantissa::formats::detail {

namespace {

bool generic_vector_ok(const Format& f) {
  // The integer rounder needs fp32's exponent range to cover the target's
  // subnormal range, and a sign bit plus hidden-bit significand layout.
  if (f.kind != Kind::floating || !f.is_signed || !f.subnormals) return false;
  if (f.exponent_bits < 1 || f.exponent_bits > 8 || f.mantissa_bits > 23) return false;
  if (1 - f.bias < -126) return false;
  // Unusual layouts (IEEE NaNs without inf, inf with fn/fnuz NaNs) are left to the reference.
  if ((f.nan == NanEncoding::ieee) != f.has_inf) return false;
  return f.total_bits() <= 16 || f.storage_bytes() == 4;
}

// Everything a plan depends on: the format's fields but its name, and the
// rounding options (the probes below round with them).
struct PlanKey {
  Kind kind;
  int exponent_bits, mantissa_bits, bias;
  bool has_inf;
  NanEncoding nan;
  bool negative_zero, subnormals, is_signed;
  Round mode;
  bool saturate, flush_subnormals;
  int random_bits;
  uint64_t seed;
  bool operator==(const PlanKey&) const = default;
};

QuantPlan build_plan(const Format& f, const RoundOptions& opt);

}  // namespace

// Building a plan probes the scalar reference six times; the last plan of
// each thread is kept, so repeated calls on small arrays pay a comparison.
QuantPlan make_plan(const Format& f, const RoundOptions& opt) {
  const PlanKey key{f.kind,          f.exponent_bits, f.mantissa_bits, f.bias,   f.has_inf,
                    f.nan,           f.negative_zero, f.subnormals,    f.is_signed, opt.mode,
                    opt.saturate,    opt.flush_subnormals, opt.random_bits, opt.seed};
  thread_local bool valid = false;
  thread_local PlanKey last_key{};
  thread_local QuantPlan last;
  if (!valid || !(key == last_key)) {
    last = build_plan(f, opt);
    last_key = key;
    valid = true;
  }
  QuantPlan p = last;
  p.format = &f;
  p.opt = opt;
  return p;
}

namespace {

QuantPlan build_plan(const Format& f, const RoundOptions& opt) {
  QuantPlan p;
  p.format = &f;
  p.opt = opt;
  p.bytes = f.storage_bytes();
  if (!generic_vector_ok(f)) return p;
  p.man_bits = f.mantissa_bits;
  p.emin = 1 - f.bias;
  p.sign_bit = uint32_t{1} << (f.exponent_bits + f.mantissa_bits);
  p.max_mag = layout_of(f).max_mag;
  p.packed_shift = f.packed_shift();
  p.min_normal_mag = uint32_t{1} << f.mantissa_bits;
  p.negative_zero = f.negative_zero;
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float big = std::numeric_limits<float>::max();
  // The reference returns codes already moved to their packed position; the
  // kernels apply packed_shift last, so keep the probes unshifted.
  const auto probe = [&](float x) { return encode(f, x, opt, 0) >> p.packed_shift; };
  p.nan_code[0] = probe(qnan);
  p.nan_code[1] = probe(-qnan);
  p.inf_code[0] = probe(inf);
  p.inf_code[1] = probe(-inf);
  p.overflow_code[0] = probe(big);
  p.overflow_code[1] = probe(-big);
  const bool ieee_like = f.nan == NanEncoding::ieee && f.has_inf && f.negative_zero;
  if (f.exponent_bits == 8 && f.bias == 127 && ieee_like) {
    if (f.mantissa_bits == 7 && p.bytes == 2) p.shape = Shape::bf16;
    else if (f.mantissa_bits == 23) p.shape = Shape::fp32;
    else p.shape = Shape::generic;
  } else if (f.exponent_bits == 5 && f.mantissa_bits == 10 && f.bias == 15 && ieee_like) {
    p.shape = Shape::fp16;
  } else {
    p.shape = Shape::generic;
  }
  return p;
}

}  // namespace

void quantize_scalar(const QuantPlan& p, const float* in, void* codes, size_t n, uint64_t base) {
  const Format& f = *p.format;
  switch (p.bytes) {
    case 1: {
      auto* out = static_cast<uint8_t*>(codes);
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(encode(f, in[i], p.opt, base + i));
      break;
    }
    case 2: {
      auto* out = static_cast<uint16_t*>(codes);
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint16_t>(encode(f, in[i], p.opt, base + i));
      break;
    }
    default: {
      auto* out = static_cast<uint32_t*>(codes);
      for (size_t i = 0; i < n; ++i) out[i] = encode(f, in[i], p.opt, base + i);
      break;
    }
  }
}

void dequantize_scalar(const QuantPlan& p, const void* codes, float* out, size_t n) {
  const Format& f = *p.format;
  switch (p.bytes) {
    case 1: {
      const auto* c = static_cast<const uint8_t*>(codes);
      for (size_t i = 0; i < n; ++i) out[i] = decode_f32(f, c[i]);
      break;
    }
    case 2: {
      const auto* c = static_cast<const uint16_t*>(codes);
      for (size_t i = 0; i < n; ++i) out[i] = decode_f32(f, c[i]);
      break;
    }
    default: {
      const auto* c = static_cast<const uint32_t*>(codes);
      for (size_t i = 0; i < n; ++i) out[i] = decode_f32(f, c[i]);
      break;
    }
  }
}

}  // namespace mantissa::formats::detail
