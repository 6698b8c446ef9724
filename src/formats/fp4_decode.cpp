// FP4 codes and block scales back to bf16 (formats/fp4.hpp): q x block
// scale, the product the cast's decoded output holds, rounded the same way
// (exact for every scale a cast writes). A band of tile rows at a time: the
// per-column block scales once, then each row as 16 lanes: nibbles to lane
// indices, the signed E2M1 value by a permute from a 16-entry table (on AVX2
// 8 lanes from two 8-entry halves: fp4_cast_avx2.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <vector>

#include "formats/fp4_cast_avx2.hpp"
#include "formats/fp4_internal.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/fp4.hpp"

namespace mantissa::formats {
namespace {

uint16_t bf16_bits(float v) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16); }

uint8_t code_at(const uint8_t* codes, bool packed, int64_t k) {
  return packed ? static_cast<uint8_t>((codes[k / 2] >> (4 * (k & 1))) & 0xF) : static_cast<uint8_t>(codes[k] & 0xF);
}

// Row i of decoded from the per-column block scales; scalar, any layout.
void decode_row_scalar(const uint8_t* codes, bool packed, const float* block, int64_t i, int64_t cols,
                       uint16_t* out) {
  for (int64_t j = 0; j < cols; ++j) out[j] = bf16_bits(e2m1_value(code_at(codes, packed, i * cols + j)) * block[j]);
}

// The same, 16 lanes at a time; packed rows start on a byte (cols even).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void decode_row_avx512(const uint8_t* codes, bool packed,
                                                                            const float* block, int64_t i,
                                                                            int64_t cols, uint16_t* out) {
  alignas(64) float table[16];
  for (int c = 0; c < 16; ++c) table[c] = e2m1_value(static_cast<uint8_t>(c));
  const __m512 tv = _mm512_load_ps(table);
  const uint8_t* row = codes + (packed ? i * cols / 2 : i * cols);
  for (int64_t j = 0; j < cols; j += 16) {
    const int64_t cnt = std::min<int64_t>(16, cols - j);
    const __mmask16 m = static_cast<__mmask16>((1u << cnt) - 1);
    __m512i c;
    if (packed) {  // 8 bytes -> 16 lanes: the low nibble in even lanes, the high in odd ones
      const __m512i w = _mm512_cvtepu8_epi64(_mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << (cnt / 2)) - 1),
                                                                  row + j / 2));
      c = _mm512_or_si512(w, _mm512_slli_epi64(_mm512_srli_epi64(w, 4), 32));
    } else {
      c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, row + j));
    }
    const __m512 v = _mm512_mul_ps(_mm512_permutexvar_ps(c, tv), _mm512_maskz_loadu_ps(m, block + j));
    _mm256_mask_storeu_epi16(out + j, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
  }
}

}  // namespace

namespace {

// fp4_scale_value of every code, once per format.
const std::array<float, 256>& scale_values(Fp4Scale scale) {
  static const auto table = [](Fp4Scale f) {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = fp4_scale_value(f, static_cast<uint8_t>(c));
    return t;
  };
  static const std::array<float, 256> nv = table(Fp4Scale::nvfp4), mx = table(Fp4Scale::mxfp4);
  return scale == Fp4Scale::nvfp4 ? nv : mx;
}

}  // namespace

float fp4_scale_value(Fp4Scale scale, uint8_t code) {
  if (scale == Fp4Scale::mxfp4) return code == 0xFF ? NAN : std::ldexp(1.0f, static_cast<int>(code) - 127);
  const int mag = code & 0x7F, e = mag >> 3, m = mag & 7;
  if (mag == 0x7F) return NAN;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return code & 0x80 ? -v : v;
}

void fp4_decode(const Fp4Spec& spec, const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                uint16_t* decoded) {
  detail::check_fp4_spec(spec, rows, cols);
  const int64_t tr = spec.tile_rows, tc = spec.tile_cols;
  const int64_t down = (rows + tr - 1) / tr, across = (cols + tc - 1) / tc;
  using DecodeRow = void (*)(const uint8_t*, bool, const float*, int64_t, int64_t, uint16_t*);
  const bool vec = fp4_vector_available() && !(spec.packed && cols % 2);
  const DecodeRow row = !vec                                          ? decode_row_scalar
                        : cpu::active_isa() >= cpu::Isa::avx512 ? decode_row_avx512
                                                                    : detail::fp4_avx2::decode_row;
  const std::array<float, 256>& value = scale_values(spec.scale);
#pragma omp parallel if (rows * cols >= (int64_t{1} << 16))
  {
    std::vector<float> block(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t ti = 0; ti < down; ++ti) {
      for (int64_t tj = 0; tj < across; ++tj) {
        const int64_t c0 = tj * tc, c1 = std::min(cols, c0 + tc);
        std::fill(block.begin() + c0, block.begin() + c1, value[scales[ti * across + tj]]);
      }
      for (int64_t i = ti * tr; i < std::min(rows, ti * tr + tr); ++i)
        row(codes, spec.packed, block.data(), i, cols, decoded + i * cols);
    }
  }
}

}  // namespace mantissa::formats
