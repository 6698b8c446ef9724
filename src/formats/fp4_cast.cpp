// The FP4 block casts' fast path (formats/fp4.hpp). One pass for the tensor
// amax, then the tensor goes one band of tile rows at a time: the band's
// column maxima (16 columns per vector, so 16 x 1 tiles get 16 amaxes per
// vector and 1 x 16 tiles one horizontal max each), the tiles' scales, then
// the band's rows with a per-column factor and block scale while the band is
// in cache. The element rounding is 16 lanes of arithmetic: the E2M1 binade
// gives the spacing, vrndscaleps rounds (nearest-even or floor + a draw).
// Without AVX-512 everything goes to fp4_cast_reference (same bits).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/fp4_internal.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/fp4.hpp"

#define MANTISSA_FP4_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace mantissa::formats {

namespace detail {

void check_fp4_spec(const Fp4Spec& spec, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0) throw std::invalid_argument("fp4_cast: negative shape");
  if (spec.tile_rows < 1) throw std::invalid_argument("fp4_cast: tile_rows must be >= 1");
  if (spec.tile_cols != 1 && spec.tile_cols != 16 && spec.tile_cols != 32)
    throw std::invalid_argument("fp4_cast: tile_cols must be 1, 16 or 32, got " + std::to_string(spec.tile_cols));
  if (spec.headroom && spec.scale != Fp4Scale::mxfp4)
    throw std::invalid_argument("fp4_cast: headroom (3/4 block scaling) is an mxfp4 option");
}

void fp4_passthrough(const float* x, int64_t n, uint8_t* codes, uint8_t* scales, int64_t tiles, uint16_t* decoded) {
  if (codes) std::memset(codes, 0, static_cast<size_t>(n));
  if (scales) std::memset(scales, 0, static_cast<size_t>(tiles));
  if (!decoded) return;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = std::bit_cast<uint32_t>(x[i]);
    if (std::isnan(x[i])) decoded[i] = static_cast<uint16_t>((b >> 16) | 0x40);  // quiet, sign kept
    else decoded[i] = static_cast<uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
  }
}

}  // namespace detail

uint32_t fp4_draw(uint64_t seed, uint64_t index) { return detail::draw_at(detail::draw_key(seed), index); }

bool fp4_vector_available() {
  return cpu::active_isa() >= cpu::Isa::avx512;
}

namespace {

// ---- 16 lanes ----------------------------------------------------------------------------
MANTISSA_FP4_AVX512 inline __m512i fmix32_16(__m512i h) {
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0x85EBCA6Bu)));
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0xC2B2AE35u)));
  return _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
}

// detail::draw_at for indices first .. first + 15.
MANTISSA_FP4_AVX512 inline __m512i draws16(detail::DrawKey k, uint64_t first) {
  const __m512i base = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(first)));
  const __m512i lo = _mm512_add_epi32(base, _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __mmask16 carry = _mm512_cmplt_epu32_mask(lo, base);
  const __m512i hi = _mm512_mask_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(first >> 32))),
                                           carry, _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(first >> 32))),
                                           _mm512_set1_epi32(1));
  const __m512i a = _mm512_mullo_epi32(_mm512_add_epi32(lo, _mm512_set1_epi32(static_cast<int>(k.lo))),
                                       _mm512_set1_epi32(static_cast<int>(0x9E3779B1u)));
  const __m512i b = _mm512_add_epi32(_mm512_mullo_epi32(hi, _mm512_set1_epi32(static_cast<int>(0x85EBCA77u))),
                                     _mm512_set1_epi32(static_cast<int>(k.hi)));
  return _mm512_srli_epi32(fmix32_16(_mm512_xor_si512(a, b)), 8);
}

struct Lanes {
  __m512i codes;  // E2M1 codes in the low byte of each lane
  __m512 value;   // signed E2M1 value
};

// E2M1 codes of y (finite), nearest-even or stochastic with `draw` (24 bits).
MANTISSA_FP4_AVX512 inline Lanes round16(__m512 y, bool stochastic, __m512i draw) {
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512 a = _mm512_min_ps(_mm512_abs_ps(y), _mm512_set1_ps(6.0f));
  const __mmask16 b0 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.0f), _CMP_LT_OQ);
  const __mmask16 b01 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(4.0f), _CMP_LT_OQ);
  __m512 inv = _mm512_mask_blend_ps(b01, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.0f));
  inv = _mm512_mask_blend_ps(b0, inv, _mm512_set1_ps(2.0f));
  __m512 ulp = _mm512_mask_blend_ps(b01, _mm512_set1_ps(2.0f), _mm512_set1_ps(1.0f));
  ulp = _mm512_mask_blend_ps(b0, ulp, _mm512_set1_ps(0.5f));
  __m512i off = _mm512_mask_blend_epi32(b01, _mm512_set1_epi32(4), _mm512_set1_epi32(2));
  off = _mm512_mask_blend_epi32(b0, off, _mm512_setzero_si512());
  const __m512 kf = _mm512_mul_ps(a, inv);  // exact: a power-of-two factor
  __m512 k;
  if (!stochastic) {
    k = _mm512_roundscale_ps(kf, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    const __m512 fl = _mm512_roundscale_ps(kf, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(draw), _mm512_set1_ps(0x1p-24f));
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(kf, fl), u, _CMP_GT_OQ);
    k = _mm512_mask_add_ps(fl, up, fl, _mm512_set1_ps(1.0f));
  }
  Lanes r;
  r.codes = _mm512_or_si512(_mm512_add_epi32(_mm512_cvttps_epi32(k), off), _mm512_srli_epi32(sign, 28));
  r.value = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(_mm512_mul_ps(k, ulp)), sign));
  return r;
}

// One row of the band: y = x / factor (nvfp4) or x (x 3/4) x factor (mxfp4);
// lanes beyond `n` untouched.
MANTISSA_FP4_AVX512 void round_row(bool nv, bool headroom, bool stochastic, detail::DrawKey key, const float* x,
                                   const float* factor, const float* block, int64_t n, uint64_t first_index,
                                   uint8_t* codes, uint16_t* decoded) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - j)) - 1);
    __m512 xv = _mm512_maskz_loadu_ps(m, x + j);
    const __m512 f = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, factor + j);
    if (headroom) xv = _mm512_mul_ps(xv, _mm512_set1_ps(0.75f));
    const __m512 y = nv ? _mm512_div_ps(xv, f) : _mm512_mul_ps(xv, f);
    const __m512i d = stochastic ? draws16(key, first_index + static_cast<uint64_t>(j)) : _mm512_setzero_si512();
    const Lanes r = round16(y, stochastic, d);
    if (codes) _mm_mask_storeu_epi8(codes + j, m, _mm512_cvtepi32_epi8(r.codes));
    if (decoded) {
      const __m512 v = _mm512_mul_ps(r.value, _mm512_maskz_loadu_ps(m, block + j));
      _mm256_mask_storeu_epi16(decoded + j, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
    }
  }
}

// Largest |x| (and whether any is inf/NaN) of n floats.
MANTISSA_FP4_AVX512 float amax16(const float* x, int64_t n, bool* nonfinite) {
  __m512 m = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(k, x + i));
    bad |= _mm512_mask_cmp_ps_mask(k, a, _mm512_set1_ps(3.4028234663852886e38f), _CMP_NLE_UQ);
    m = _mm512_max_ps(m, a);
  }
  *nonfinite = bad != 0;
  return _mm512_reduce_max_ps(m);
}

// Column maxima of |x| over rows [r0, r1) (cols wide).
MANTISSA_FP4_AVX512 void column_max(const float* x, int64_t cols, int64_t r0, int64_t r1, float* out) {
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 k = cols - j >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (cols - j)) - 1);
    __m512 m = _mm512_setzero_ps();
    for (int64_t i = r0; i < r1; ++i) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(k, x + i * cols + j)));
    _mm512_mask_storeu_ps(out + j, k, m);
  }
}

// E4M3 (round to nearest even) of v in [2^-9, 448]: its code and value.
uint8_t e4m3_positive(float v, float* value) {
  if (v < 0x1p-6f) {
    const float q = std::nearbyint(v * 512.0f);
    *value = q * 0x1p-9f;
    return static_cast<uint8_t>(q);
  }
  uint32_t b = std::bit_cast<uint32_t>(v);
  b = (b + 0x7FFFFu + ((b >> 20) & 1u)) & 0xFFF00000u;
  *value = std::bit_cast<float>(b);
  return static_cast<uint8_t>((((b >> 23) - 127 + 7) << 3) | ((b >> 20) & 7u));
}

Fp4Result cast_vector(const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, uint8_t* codes,
                      uint8_t* scales, uint16_t* decoded) {
  const int64_t n = rows * cols;
  Fp4Result r;
  const float amax = amax16(x, n, &r.nonfinite);
  if (r.nonfinite) {
    detail::fp4_passthrough(x, n, codes, scales, fp4_tile_count(spec, rows, cols), decoded);
    return r;
  }
  const bool nv = spec.scale == Fp4Scale::nvfp4;
  const bool headroom = !nv && spec.headroom;
  if (nv) r.tensor_scale = std::max(amax / (6.0f * 448.0f), 0x1p-117f);
  else if (headroom) r.tensor_scale = 4.0f / 3.0f;
  const bool sr = spec.rounding == Fp4Rounding::stochastic;
  const detail::DrawKey key = detail::draw_key(spec.seed);
  const int64_t tr = spec.tile_rows, tc = spec.tile_cols;
  const int64_t down = (rows + tr - 1) / tr, across = (cols + tc - 1) / tc;
  const float t = r.tensor_scale;
#pragma omp parallel if (n >= (int64_t{1} << 16))
  {
    std::vector<float> colmax(static_cast<size_t>(cols)), factor(static_cast<size_t>(cols)),
        block(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t ti = 0; ti < down; ++ti) {
      const int64_t r0 = ti * tr, r1 = std::min(rows, r0 + tr);
      column_max(x, cols, r0, r1, colmax.data());
      for (int64_t tj = 0; tj < across; ++tj) {
        const int64_t c0 = tj * tc, c1 = std::min(cols, c0 + tc);
        const float amax_b = *std::max_element(colmax.begin() + c0, colmax.begin() + c1);
        float f = 0, s = 0;
        uint8_t code = 0;
        if (nv) {
          code = e4m3_positive(std::clamp((amax_b / 6.0f) / t, 0x1p-9f, 448.0f), &s);
          f = t * s;
        } else {
          const int e = amax_b > 0 ? std::clamp(std::ilogb(amax_b) - 2, -127, 127) : -127;
          code = static_cast<uint8_t>(e + 127);
          s = std::ldexp(1.0f, e);
          f = std::ldexp(1.0f, -e);
        }
        if (scales) scales[ti * across + tj] = code;
        std::fill(factor.begin() + c0, factor.begin() + c1, f);
        std::fill(block.begin() + c0, block.begin() + c1, s);
      }
      for (int64_t i = r0; i < r1; ++i)
        round_row(nv, headroom, sr, key, x + i * cols, factor.data(), block.data(), cols,
                  static_cast<uint64_t>(i * cols), codes ? codes + i * cols : nullptr,
                  decoded ? decoded + i * cols : nullptr);
    }
  }
  return r;
}

}  // namespace

void fp4_round_elements(Fp4Scale scale, const float* x, const float* factor, int64_t n, Fp4Rounding rounding,
                        uint64_t seed, uint64_t first_index, uint8_t* codes) {
  if (!fp4_vector_available()) {
    fp4_round_elements_reference(scale, x, factor, n, rounding, seed, first_index, codes);
    return;
  }
  std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  round_row(scale == Fp4Scale::nvfp4, false, rounding == Fp4Rounding::stochastic, detail::draw_key(seed), x, factor,
            ones.data(), n, first_index, codes, nullptr);
}

Fp4Result fp4_cast(const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, uint8_t* codes,
                   uint8_t* scales, uint16_t* decoded) {
  detail::check_fp4_spec(spec, rows, cols);
  if (!fp4_vector_available() || rows * cols == 0) return fp4_cast_reference(spec, x, rows, cols, codes, scales, decoded);
  return cast_vector(spec, x, rows, cols, codes, scales, decoded);
}

}  // namespace mantissa::formats
