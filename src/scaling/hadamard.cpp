// The 16-point RHT (scaling/hadamard.hpp): per column of a 16-row group,
// signs, then the four butterfly stages of the fast Walsh-Hadamard transform
// (a + b, a - b at distances 1, 2, 4, 8), then x 1/4 (exact).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "mantissa/scaling/hadamard.hpp"
#include "mantissa/cpu/isa.hpp"

#include <immintrin.h>

#include <algorithm>

namespace mantissa::scaling {
namespace {

bool has_avx512() { return cpu::active_isa() >= cpu::Isa::avx512; }

__attribute__((target("avx512f"))) void group_avx512(const float* in, float* g, int64_t cols, const RhtSigns& s) {
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 m = cols - j >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (cols - j)) - 1);
    __m512 v[16];
    for (int r = 0; r < 16; ++r) v[r] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, in + r * cols + j), _mm512_set1_ps(s[r]));
    for (int h = 1; h < 16; h *= 2)
      for (int i = 0; i < 16; i += 2 * h)
        for (int k = i; k < i + h; ++k) {
          const __m512 a = v[k], b = v[k + h];
          v[k] = _mm512_add_ps(a, b);
          v[k + h] = _mm512_sub_ps(a, b);
        }
    for (int r = 0; r < 16; ++r) _mm512_mask_storeu_ps(g + r * cols + j, m, _mm512_mul_ps(v[r], _mm512_set1_ps(0.25f)));
  }
}

void group_scalar(const float* in, float* g, int64_t cols, const RhtSigns& s) {
  for (int64_t j = 0; j < cols; ++j) {
    float v[16];
    for (int r = 0; r < 16; ++r) v[r] = in[r * cols + j] * s[r];
    for (int h = 1; h < 16; h *= 2)
      for (int i = 0; i < 16; i += 2 * h)
        for (int k = i; k < i + h; ++k) {
          const float a = v[k], b = v[k + h];
          v[k] = a + b;
          v[k + h] = a - b;
        }
    for (int r = 0; r < 16; ++r) g[r * cols + j] = v[r] * 0.25f;
  }
}

}  // namespace

RhtSigns rht_signs(uint64_t seed, bool random) {
  RhtSigns s;
  uint64_t z = seed;
  for (int i = 0; i < 16; ++i) {
    z += 0x9E3779B97F4A7C15ull;
    uint64_t w = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    w = (w ^ (w >> 27)) * 0x94D049BB133111EBull;
    w ^= w >> 31;
    s[i] = !random || (w >> 63) == 0 ? 1.0f : -1.0f;
  }
  return s;
}

void rht_rows(const float* in, float* out, int64_t rows, int64_t cols, const RhtSigns& signs) {
  const int64_t groups = rows / 16;
  const bool vec = has_avx512();
#pragma omp parallel for schedule(static) if (groups * cols >= 4096)
  for (int64_t g = 0; g < groups; ++g) {
    if (vec) group_avx512(in + g * 16 * cols, out + g * 16 * cols, cols, signs);
    else group_scalar(in + g * 16 * cols, out + g * 16 * cols, cols, signs);
  }
  if (in != out)
    std::copy(in + groups * 16 * cols, in + rows * cols, out + groups * 16 * cols);
}

void rht_rows(float* x, int64_t rows, int64_t cols, const RhtSigns& signs) { rht_rows(x, x, rows, cols, signs); }

}  // namespace mantissa::scaling
