// The FP4 block casts' fast path (formats/fp4.hpp). NVFP4 first finds the
// tensor amax (its tensor scale); MXFP4 needs none. Row tiles (1 x 16, 1 x 32)
// and column tiles (16 x 1, 32 x 1), the shapes of the recipes' activation
// and gradient casts, then go through the register paths of fp4_tiles.cpp.
// Other tiles (2-D weight blocks) go one band of tile rows at a time (with a
// Hadamard transform, rotated into a band buffer first): the band's column
// maxima, the tiles' scales 16 tiles a vector (fp4_lanes.hpp), then the
// band's rows with a per-column factor and block scale while the band is in
// cache. The element rounding is 16 lanes of arithmetic: the E2M1 binade
// gives the spacing, vrndscaleps rounds (nearest-even or floor + a draw).
// On AVX2 the same route runs on 8 lanes (fp4_cast_avx2.cpp), every tile
// shape through the band route; without AVX2 everything goes to
// fp4_cast_reference (same bits).
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

#include "formats/fp4_cast_avx2.hpp"
#include "formats/fp4_internal.hpp"
#include "formats/fp4_lanes.hpp"
#include "formats/fp4_tiles.hpp"
#include "formats/hadamard16_internal.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/fp4.hpp"
#include "mantissa/formats/hadamard16.hpp"

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

namespace {

using detail::RoundRow;
using detail::RowOut;

// One row of the band: y = x / factor (nvfp4) or x (x 3/4) x factor (mxfp4);
// lanes beyond `n` untouched. packed: `codes` is the row's first byte (the
// row starts at an even element and n is even).
template <bool Nv, bool Stochastic>
MANTISSA_FP4_AVX512 void round_row(bool headroom, detail::DrawKey key, const float* x, const float* factor,
                                   const float* block, int64_t n, uint64_t first_index, RowOut out) {
  const bool run = Stochastic && lanes::shares_upper(first_index, n);
  lanes::DrawRun draws = lanes::draw_run(key, first_index);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = lanes::first(n - j);
    __m512 xv = _mm512_maskz_loadu_ps(m, x + j);
    const __m512 f = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, factor + j);
    if (headroom) xv = _mm512_mul_ps(xv, _mm512_set1_ps(0.75f));
    const __m512 y = Nv ? _mm512_div_ps(xv, f) : _mm512_mul_ps(xv, f);
    __m512i d = _mm512_setzero_si512();
    if constexpr (Stochastic)
      d = run ? lanes::draws16(draws) : lanes::draws16(key, first_index + static_cast<uint64_t>(j));
    const lanes::Rounded r = lanes::round16<Stochastic>(y, d);
    if (out.codes && out.packed)
      _mm_mask_storeu_epi8(out.codes + j / 2, lanes::first(std::min<int64_t>(16, n - j) / 2), lanes::pack16(r.codes));
    else if (out.codes)
      _mm_mask_storeu_epi8(out.codes + j, m, _mm512_cvtepi32_epi8(r.codes));
    if (out.decoded) {
      const __m512 v = _mm512_mul_ps(r.value, _mm512_maskz_loadu_ps(m, block + j));
      _mm256_mask_storeu_epi16(out.decoded + j, m,
                               _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
    }
  }
}

RoundRow round_row_for(bool nv, bool stochastic) {
  if (nv) return stochastic ? round_row<true, true> : round_row<true, false>;
  return stochastic ? round_row<false, true> : round_row<false, false>;
}

// Largest |x| (and whether any is inf/NaN) of n floats.
MANTISSA_FP4_AVX512 float amax16(const float* x, int64_t n, bool* nonfinite) {
  __m512 m = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = lanes::first(n - i);
    const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(k, x + i));
    bad |= _mm512_mask_cmp_ps_mask(k, a, _mm512_set1_ps(3.4028234663852886e38f), _CMP_NLE_UQ);
    m = _mm512_max_ps(m, a);
  }
  *nonfinite = bad != 0;
  return _mm512_reduce_max_ps(m);
}

// Column maxima of |x| over rows [0, r) (cols wide); true if any is inf/NaN.
MANTISSA_FP4_AVX512 bool column_max(const float* x, int64_t cols, int64_t r, float* out) {
  __mmask16 bad = 0;
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 k = lanes::first(cols - j);
    __m512 m = _mm512_setzero_ps();
    for (int64_t i = 0; i < r; ++i) {
      const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(k, x + i * cols + j));
      bad |= _mm512_mask_cmp_ps_mask(k, a, _mm512_set1_ps(3.4028234663852886e38f), _CMP_NLE_UQ);
      m = _mm512_max_ps(m, a);
    }
    _mm512_mask_storeu_ps(out + j, k, m);
  }
  return bad != 0;
}

// The scales of n tiles from their maxima (codes may be null).
MANTISSA_FP4_AVX512 void block_scales(bool nv, float t, const float* amax, int64_t n, uint8_t* codes, float* factor,
                                      float* block) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = lanes::first(n - j);
    const lanes::Scales s = lanes::scales16(nv, _mm512_maskz_loadu_ps(m, amax + j), t);
    if (codes) _mm_mask_storeu_epi8(codes + j, m, _mm512_cvtepi32_epi8(s.code));
    _mm512_mask_storeu_ps(factor + j, m, s.factor);
    _mm512_mask_storeu_ps(block + j, m, s.block);
  }
}

// The scales of one band's tiles (tc columns wide) from its column maxima:
// codes[across] (null: not kept) and, per column, the factor and block scale
// of its tile. 16 tiles at a time: for tc 16 or 32 their maxima by hmax16.
MANTISSA_FP4_AVX512 void band_scales(bool nv, float t, int64_t tc, const float* colmax, int64_t cols, uint8_t* codes,
                                     float* factor, float* block) {
  if (tc == 1) {
    block_scales(nv, t, colmax, cols, codes, factor, block);
    return;
  }
  const int64_t across = (cols + tc - 1) / tc;
  for (int64_t t0 = 0; t0 < across; t0 += 16) {
    __m512 v[16];
    for (int64_t k = 0; k < 16; ++k) {
      const int64_t c0 = (t0 + k) * tc, c1 = std::min(cols, c0 + tc);
      v[k] = _mm512_setzero_ps();
      for (int64_t c = c0; c < c1; c += 16) v[k] = _mm512_max_ps(v[k], _mm512_maskz_loadu_ps(lanes::first(c1 - c), colmax + c));
    }
    const lanes::Scales s = lanes::scales16(nv, lanes::hmax16(v), t);
    const int64_t tiles = std::min<int64_t>(16, across - t0);
    if (codes) _mm_mask_storeu_epi8(codes + t0, lanes::first(tiles), _mm512_cvtepi32_epi8(s.code));
    alignas(64) float f[16], b[16];
    _mm512_store_ps(f, s.factor);
    _mm512_store_ps(b, s.block);
    for (int64_t k = 0; k < tiles; ++k) {
      const int64_t c0 = (t0 + k) * tc, c1 = std::min(cols, c0 + tc);
      for (int64_t c = c0; c < c1; c += 16) {
        _mm512_mask_storeu_ps(factor + c, lanes::first(c1 - c), _mm512_set1_ps(f[k]));
        _mm512_mask_storeu_ps(block + c, lanes::first(c1 - c), _mm512_set1_ps(b[k]));
      }
    }
  }
}

// The vector pieces of one instruction set; the register paths for row and
// column tiles null where the band route takes them.
struct Kernels {
  float (*amax)(const float*, int64_t, bool*);
  bool (*column_max)(const float*, int64_t, int64_t, float*);
  void (*block_scales)(bool, float, const float*, int64_t, uint8_t*, float*, float*);
  void (*band_scales)(bool, float, int64_t, const float*, int64_t, uint8_t*, float*, float*);
  RoundRow (*round_row_for)(bool, bool);
  detail::RowTiles (*row_tiles_for)(bool, bool);
  detail::ColumnTilesBand (*column_tiles_band_for)(bool, bool);
};
const Kernels kAvx512{amax16, column_max, block_scales, band_scales, round_row_for, detail::row_tiles_for,
                      detail::column_tiles_band_for};
namespace avx2 = detail::fp4_avx2;
const Kernels kAvx2{avx2::amax, avx2::column_max, avx2::block_scales, avx2::band_scales, avx2::round_row_for, nullptr,
                    nullptr};

// Ordered, best first (cpu::select); the scalar entry means the reference.
const cpu::Impl<const Kernels*> kFp4[] = {
    {"avx512:fp4", cpu::Isa::avx512, &kAvx512},
    {"avx2:fp4", cpu::Isa::avx2, &kAvx2},
    {"scalar:fp4", cpu::Isa::scalar, nullptr},
};
const Kernels* vector_kernels() { return cpu::select(kFp4).fn; }

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

// The non-finite pass-through (formats/fp4.hpp) of x, rotated first with rht.
Fp4Result passthrough(const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, uint8_t* codes,
                      uint8_t* scales, uint16_t* decoded) {
  const int64_t n = rows * cols;
  std::vector<float> rotated;
  if (spec.rht_signs) {
    rotated.resize(static_cast<size_t>(n));
    hadamard16(x, rotated.data(), rows, cols, spec.rht_axis, spec.rht_signs);
  }
  detail::fp4_passthrough(spec.rht_signs ? rotated.data() : x, n, codes, detail::fp4_code_bytes(spec, n), scales,
                          fp4_tile_count(spec, rows, cols), decoded);
  Fp4Result r;
  r.nonfinite = true;
  return r;
}

// NVFP4 needs the tensor's amax (its tensor scale) before any block scale,
// so a first pass finds it; MXFP4's block scales stand alone, so its one
// pass watches for inf/NaN itself and, finding any, redoes the tensor as the
// pass-through (every output overwritten).
Fp4Result cast_vector(const Kernels& k, const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, uint8_t* codes,
                      uint8_t* scales, uint16_t* decoded) {
  const int64_t n = rows * cols;
  const bool rht = spec.rht_signs != nullptr;
  const bool nv = spec.scale == Fp4Scale::nvfp4;
  const bool headroom = !nv && spec.headroom;
  Fp4Result r;
  if (nv) {
    bool nonfinite = false;
    const float amax = rht ? rotated_amax(spec, x, rows, cols, &nonfinite) : k.amax(x, n, &nonfinite);
    if (nonfinite) return passthrough(spec, x, rows, cols, codes, scales, decoded);
    r.tensor_scale = std::max(amax / (6.0f * 448.0f), 0x1p-117f);
  } else if (headroom) {
    r.tensor_scale = 4.0f / 3.0f;
  }
  const RoundRow round = k.round_row_for(nv, spec.rounding == Fp4Rounding::stochastic);
  const detail::DrawKey key = detail::draw_key(spec.seed);
  const int64_t tr = spec.tile_rows, tc = spec.tile_cols;
  const int64_t down = (rows + tr - 1) / tr, across = (cols + tc - 1) / tc;
  const float t = r.tensor_scale;
  bool nonfinite = false;
  if (k.row_tiles_for && tr == 1 && tc >= 16 && (!rht || spec.rht_axis == 2)) {
    const detail::RowTiles row = k.row_tiles_for(nv, spec.rounding == Fp4Rounding::stochastic);
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16)) reduction(|| : nonfinite)
    for (int64_t i = 0; i < rows; ++i)
      nonfinite = row(spec, x, cols, i, t, scales ? scales + i * across : nullptr, codes, decoded) || nonfinite;
    if (nonfinite) return passthrough(spec, x, rows, cols, codes, scales, decoded);
    return r;
  }
  if (k.column_tiles_band_for && tc == 1 && (tr == 16 || tr == 32) && (!rht || spec.rht_axis == 1)) {
    const detail::ColumnTilesBand band = k.column_tiles_band_for(nv, spec.rounding == Fp4Rounding::stochastic);
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16)) reduction(|| : nonfinite)
    for (int64_t ti = 0; ti < down; ++ti)
      nonfinite = band(spec, x, rows, cols, ti * tr, std::min(rows, ti * tr + tr), t,
                       scales ? scales + ti * across : nullptr, codes, decoded) || nonfinite;
    if (nonfinite) return passthrough(spec, x, rows, cols, codes, scales, decoded);
    return r;
  }
#pragma omp parallel if (n >= (int64_t{1} << 16)) reduction(|| : nonfinite)
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
      nonfinite = k.column_max(xb, cols, r1 - r0, colmax.data()) || nonfinite;
      k.band_scales(nv, t, tc, colmax.data(), cols, scales ? scales + ti * across : nullptr, factor.data(),
                  block.data());
      for (int64_t i = r0; i < r1; ++i)
        round(headroom, key, xb + (i - r0) * cols, factor.data(), block.data(), cols, static_cast<uint64_t>(i * cols),
              {codes ? codes + (spec.packed ? i * cols / 2 : i * cols) : nullptr, spec.packed,
               decoded ? decoded + i * cols : nullptr});
    }
  }
  if (nonfinite) return passthrough(spec, x, rows, cols, codes, scales, decoded);
  return r;
}

}  // namespace

bool fp4_vector_available() { return vector_kernels() != nullptr; }

const char* detail::fp4_implementation() { return cpu::select(kFp4).name; }

void fp4_round_elements(Fp4Scale scale, const float* x, const float* factor, int64_t n, Fp4Rounding rounding,
                        uint64_t seed, uint64_t first_index, uint8_t* codes) {
  const Kernels* k = vector_kernels();
  if (!k) {
    fp4_round_elements_reference(scale, x, factor, n, rounding, seed, first_index, codes);
    return;
  }
  std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  k->round_row_for(scale == Fp4Scale::nvfp4, rounding == Fp4Rounding::stochastic)(
      false, detail::draw_key(seed), x, factor, ones.data(), n, first_index, {codes, false, nullptr});
}

void fp4_block_scales(Fp4Scale scale, const float* amax, int64_t n, float t, uint8_t* codes, float* factor,
                      float* block) {
  const Kernels* k = vector_kernels();
  if (!k) {
    fp4_block_scales_reference(scale, amax, n, t, codes, factor, block);
    return;
  }
  k->block_scales(scale == Fp4Scale::nvfp4, t, amax, n, codes, factor, block);
}

Fp4Result fp4_cast(const Fp4Spec& spec, const float* x, int64_t rows, int64_t cols, uint8_t* codes,
                   uint8_t* scales, uint16_t* decoded) {
  detail::check_fp4_spec(spec, rows, cols);
  const Kernels* k = vector_kernels();
  if (!k || rows * cols == 0) return fp4_cast_reference(spec, x, rows, cols, codes, scales, decoded);
  if (codes && spec.packed && cols % 2) {  // rows straddle bytes: one code a byte first
    Fp4Spec bytes = spec;
    bytes.packed = false;
    std::vector<uint8_t> tmp(static_cast<size_t>(rows * cols));
    const Fp4Result r = cast_vector(*k, bytes, x, rows, cols, tmp.data(), scales, decoded);
    detail::pack_nibbles(tmp.data(), rows * cols, codes);
    return r;
  }
  return cast_vector(*k, spec, x, rows, cols, codes, scales, decoded);
}

}  // namespace mantissa::formats
