// The FP4 block casts' fast path (formats/fp4.hpp). One pass for the tensor
// amax, then the tensor goes one band of tile rows at a time (with a Hadamard
// transform, both passes rotate 16 rows or one band into a buffer first): the band's
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
#include "formats/hadamard16_internal.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/fp4.hpp"
#include "mantissa/formats/hadamard16.hpp"

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
  if (spec.rht_signs && spec.rht_axis != 1 && spec.rht_axis != 2)
    throw std::invalid_argument("fp4_cast: rht_axis must be 1 (rows) or 2 (columns), got " +
                                std::to_string(spec.rht_axis));
  if (spec.rht_signs && spec.rht_axis == 1 && spec.tile_rows % 16 != 0)
    throw std::invalid_argument("fp4_cast: a Hadamard transform along rows needs tile_rows a multiple of 16, got " +
                                std::to_string(spec.tile_rows));
}

void pack_nibbles(const uint8_t* codes, int64_t n, uint8_t* packed) {
  for (int64_t k = 0; k + 1 < n; k += 2) packed[k / 2] = static_cast<uint8_t>((codes[k] & 0xF) | (codes[k + 1] << 4));
  if (n % 2) packed[n / 2] = codes[n - 1] & 0xF;
}

void fp4_passthrough(const float* x, int64_t n, uint8_t* codes, int64_t code_bytes, uint8_t* scales, int64_t tiles,
                     uint16_t* decoded) {
  if (codes) std::memset(codes, 0, static_cast<size_t>(code_bytes));
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

// Codes of 16 lanes two per byte (even lane low): 8 bytes.
MANTISSA_FP4_AVX512 inline __m128i pack16(__m512i codes) {
  return _mm512_cvtepi64_epi8(_mm512_or_si512(codes, _mm512_srli_epi64(codes, 28)));
}

// One row of the band: y = x / factor (nvfp4) or x (x 3/4) x factor (mxfp4);
// lanes beyond `n` untouched. packed: `codes` is the row's first byte (the
// row starts at an even element and n is even).
MANTISSA_FP4_AVX512 void round_row(bool nv, bool headroom, bool stochastic, detail::DrawKey key, const float* x,
                                   const float* factor, const float* block, int64_t n, uint64_t first_index,
                                   uint8_t* codes, bool packed, uint16_t* decoded) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - j)) - 1);
    __m512 xv = _mm512_maskz_loadu_ps(m, x + j);
    const __m512 f = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, factor + j);
    if (headroom) xv = _mm512_mul_ps(xv, _mm512_set1_ps(0.75f));
    const __m512 y = nv ? _mm512_div_ps(xv, f) : _mm512_mul_ps(xv, f);
    const __m512i d = stochastic ? draws16(key, first_index + static_cast<uint64_t>(j)) : _mm512_setzero_si512();
    const Lanes r = round16(y, stochastic, d);
    if (codes && packed)
      _mm_mask_storeu_epi8(codes + j / 2, static_cast<__mmask16>((1u << (std::min<int64_t>(16, n - j) / 2)) - 1),
                           pack16(r.codes));
    else if (codes) _mm_mask_storeu_epi8(codes + j, m, _mm512_cvtepi32_epi8(r.codes));
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

// Largest |value| of the rotated x (spec.rht_signs), 16 rows at a time
// rotated in registers; the rotation is not kept.
float rotated_amax(const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, bool* nonfinite) {
  const int64_t chunks = (rows + 15) / 16;
  float amax = 0;
  bool bad = false;
#pragma omp parallel if (rows * cols >= (int64_t{1} << 16))
  {
    float m = 0;
    bool b = false;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t r0 = c * 16, h = std::min<int64_t>(16, rows - r0);
      bool nf = false;
      m = std::max(m, detail::hadamard16_amax(x + r0 * cols, h, cols, spec.rht_axis, spec.rht_signs, &nf));
      b = b || nf;
    }
#pragma omp critical
    {
      amax = std::max(amax, m);
      bad = bad || b;
    }
  }
  *nonfinite = bad;
  return amax;
}

Fp4Result cast_vector(const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, uint8_t* codes,
                      uint8_t* scales, uint16_t* decoded) {
  const int64_t n = rows * cols;
  const bool rht = spec.rht_signs != nullptr;
  Fp4Result r;
  const float amax = rht ? rotated_amax(spec, x, rows, cols, &r.nonfinite) : amax16(x, n, &r.nonfinite);
  if (r.nonfinite) {
    std::vector<float> rotated;
    if (rht) {
      rotated.resize(static_cast<size_t>(n));
      hadamard16(x, rotated.data(), rows, cols, spec.rht_axis, spec.rht_signs);
    }
    detail::fp4_passthrough(rht ? rotated.data() : x, n, codes, detail::fp4_code_bytes(spec, n), scales,
                            fp4_tile_count(spec, rows, cols), decoded);
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
        block(static_cast<size_t>(cols)), band(rht ? static_cast<size_t>(tr * cols) : 0);
#pragma omp for schedule(static)
    for (int64_t ti = 0; ti < down; ++ti) {
      const int64_t r0 = ti * tr, r1 = std::min(rows, r0 + tr);
      const float* xb = x + r0 * cols;  // the band's rows, rotated in cache with rht
      if (rht) {
        detail::hadamard16_serial(xb, band.data(), r1 - r0, cols, spec.rht_axis, spec.rht_signs);
        xb = band.data();
      }
      column_max(xb, cols, 0, r1 - r0, colmax.data());
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
        round_row(nv, headroom, sr, key, xb + (i - r0) * cols, factor.data(), block.data(), cols,
                  static_cast<uint64_t>(i * cols), codes ? codes + (spec.packed ? i * cols / 2 : i * cols) : nullptr,
                  spec.packed, decoded ? decoded + i * cols : nullptr);
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
            ones.data(), n, first_index, codes, false, nullptr);
}

Fp4Result fp4_cast(const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, uint8_t* codes,
                   uint8_t* scales, uint16_t* decoded) {
  detail::check_fp4_spec(spec, rows, cols);
  if (!fp4_vector_available() || rows * cols == 0) return fp4_cast_reference(spec, x, rows, cols, codes, scales, decoded);
  if (codes && spec.packed && cols % 2) {  // rows straddle bytes: one code a byte first
    Fp4Spec bytes = spec;
    bytes.packed = false;
    std::vector<uint8_t> tmp(static_cast<size_t>(rows * cols));
    const Fp4Result r = cast_vector(bytes, x, rows, cols, tmp.data(), scales, decoded);
    detail::pack_nibbles(tmp.data(), rows * cols, codes);
    return r;
  }
  return cast_vector(spec, x, rows, cols, codes, scales, decoded);
}

}  // namespace mantissa::formats
