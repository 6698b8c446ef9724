// Scalar reference of the FP4 block casts (formats/fp4.hpp), written from the
// definitions tile by tile: E2M1 rounding by search over the value table, the
// E4M3 block scale through the formats module's reference encoder. The
// vector path (fp4_cast.cpp) must give the same bits.
#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/fp4_internal.hpp"
#include "mantissa/formats/fp4.hpp"
#include "mantissa/formats/hadamard16.hpp"
#include "mantissa/formats/round.hpp"

namespace mantissa::formats {
namespace {

constexpr float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Magnitude code of |y| (finite): nearest E2M1 value, ties to the even code;
// or stochastic between the two neighbours.
uint8_t e2m1_magnitude(float a, Fp4Rounding rounding, uint32_t draw) {
  a = std::min(a, 6.0f);
  int lo = 0;
  while (lo < 7 && kE2M1[lo + 1] <= a) ++lo;
  if (lo == 7 || kE2M1[lo] == a) return static_cast<uint8_t>(lo);
  const float below = kE2M1[lo], above = kE2M1[lo + 1];
  if (rounding == Fp4Rounding::stochastic) {
    const float p = (a - below) / (above - below);  // exact: a - below < above - below, a power of two
    return static_cast<uint8_t>(p > static_cast<float>(draw) * 0x1p-24f ? lo + 1 : lo);
  }
  const float d_lo = a - below, d_hi = above - a;
  if (d_lo < d_hi) return static_cast<uint8_t>(lo);
  if (d_hi < d_lo) return static_cast<uint8_t>(lo + 1);
  return static_cast<uint8_t>(lo % 2 == 0 ? lo : lo + 1);
}

uint8_t e2m1_code(float y, Fp4Rounding rounding, uint32_t draw) {
  return static_cast<uint8_t>((std::signbit(y) ? 8 : 0) | e2m1_magnitude(std::fabs(y), rounding, draw));
}

float bf16_exact(float v) { return v; }  // every decoded value has <= 6 significant bits

}  // namespace

float e2m1_value(uint8_t code) {
  const float v = kE2M1[code & 7];
  return code & 8 ? -v : v;
}

void fp4_round_elements_reference(Fp4Scale scale, const float* x, const float* factor, int64_t n,
                                  Fp4Rounding rounding, uint64_t seed, uint64_t first_index, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) {
    const float y = scale == Fp4Scale::nvfp4 ? x[i] / factor[i] : x[i] * factor[i];
    const uint32_t draw = rounding == Fp4Rounding::stochastic ? fp4_draw(seed, first_index + i) : 0;
    codes[i] = e2m1_code(y, rounding, draw);
  }
}

void fp4_block_scales_reference(Fp4Scale scale, const float* amax, int64_t n, float t, uint8_t* codes, float* factor,
                                float* block) {
  static const Format& e4m3 = preset("e4m3fn");
  const RoundOptions rne{.mode = Round::nearest_even, .saturate = true};
  for (int64_t i = 0; i < n; ++i) {
    if (scale == Fp4Scale::nvfp4) {
      const float wanted = std::clamp((amax[i] / 6.0f) / t, 0x1p-9f, 448.0f);
      codes[i] = static_cast<uint8_t>(encode(e4m3, wanted, rne));
      block[i] = decode_f32(e4m3, codes[i]);
      factor[i] = t * block[i];
    } else {
      int e = -127;
      if (amax[i] > 0) e = std::clamp(std::ilogb(amax[i]) - 2, -127, 127);
      codes[i] = static_cast<uint8_t>(e + 127);
      block[i] = std::ldexp(1.0f, e);
      factor[i] = std::ldexp(1.0f, -e);
    }
  }
}

Fp4Result fp4_cast_reference(const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, uint8_t* codes,
                             uint8_t* scales, uint16_t* decoded) {
  detail::check_fp4_spec(spec, rows, cols);
  const int64_t n = rows * cols;
  if (spec.rht_signs || (codes && spec.packed)) {  // rotate a copy, cast it one code a byte, pack
    Fp4Spec plain = spec;
    plain.rht_signs = nullptr;
    plain.packed = false;
    std::vector<float> rotated;
    if (spec.rht_signs) {
      rotated.resize(static_cast<size_t>(n));
      hadamard16(x, rotated.data(), rows, cols, spec.rht_axis, spec.rht_signs);
    }
    std::vector<uint8_t> bytes(codes && spec.packed ? static_cast<size_t>(n) : 0);
    const Fp4Result r = fp4_cast_reference(plain, spec.rht_signs ? rotated.data() : x, rows, cols,
                                           spec.packed ? (codes ? bytes.data() : nullptr) : codes, scales, decoded);
    if (codes && spec.packed) detail::pack_nibbles(bytes.data(), n, codes);
    return r;
  }
  Fp4Result r;
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) r.nonfinite = true;
    amax = std::max(amax, std::fabs(x[i]));
  }
  if (r.nonfinite) {
    detail::fp4_passthrough(x, n, codes, n, scales, fp4_tile_count(spec, rows, cols), decoded);
    return r;
  }
  const bool nv = spec.scale == Fp4Scale::nvfp4;
  if (nv) r.tensor_scale = std::max(amax / (6.0f * 448.0f), 0x1p-117f);
  else if (spec.headroom) r.tensor_scale = 4.0f / 3.0f;
  const int64_t down = (rows + spec.tile_rows - 1) / spec.tile_rows;
  const int64_t across = (cols + spec.tile_cols - 1) / spec.tile_cols;
  for (int64_t ti = 0; ti < down; ++ti)
    for (int64_t tj = 0; tj < across; ++tj) {
      const int64_t r0 = ti * spec.tile_rows, r1 = std::min(rows, r0 + spec.tile_rows);
      const int64_t c0 = tj * spec.tile_cols, c1 = std::min(cols, c0 + spec.tile_cols);
      float amax_b = 0;
      for (int64_t i = r0; i < r1; ++i)
        for (int64_t j = c0; j < c1; ++j) amax_b = std::max(amax_b, std::fabs(x[i * cols + j]));
      float factor = 0, block = 0;  // factor: nvfp4 divisor / mxfp4 multiplier; block: the decoded block scale
      uint8_t scale_code = 0;
      fp4_block_scales_reference(spec.scale, &amax_b, 1, r.tensor_scale, &scale_code, &factor, &block);
      if (scales) scales[ti * across + tj] = scale_code;
      for (int64_t i = r0; i < r1; ++i)
        for (int64_t j = c0; j < c1; ++j) {
          const int64_t k = i * cols + j;
          const float xv = !nv && spec.headroom ? x[k] * 0.75f : x[k];
          const float y = nv ? xv / factor : xv * factor;
          const uint32_t draw = spec.rounding == Fp4Rounding::stochastic ? fp4_draw(spec.seed, k) : 0;
          const uint8_t c = e2m1_code(y, spec.rounding, draw);
          if (codes) codes[k] = c;
          if (decoded) decoded[k] = static_cast<uint16_t>(std::bit_cast<uint32_t>(bf16_exact(e2m1_value(c) * block)) >> 16);
        }
    }
  return r;
}

}  // namespace mantissa::formats
