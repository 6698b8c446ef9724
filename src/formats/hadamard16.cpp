// The 16-point Hadamard transform (formats/hadamard16.hpp). Along rows a
// vector holds one row of 16 columns and a group is 16 vectors; along columns
// a vector holds one group and the butterflies pair lanes by permutes. On
// AVX2 the same in 8 lanes (hadamard16_avx2.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>
#include <string>

#include "formats/hadamard16_internal.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/hadamard16.hpp"

namespace mantissa::formats {
namespace {

// ---- along rows: rows 0..15 of `in` into `out`, per column (detail::rows_rotate) -----------------
__attribute__((target("avx512f"))) inline __mmask16 column_mask(int64_t cols, int64_t j) {
  return cols - j >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (cols - j)) - 1);
}

__attribute__((target("avx512f"))) void rows_group_avx512(const float* in, float* out, int64_t cols,
                                                          const float* s) {
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 m = column_mask(cols, j);
    __m512 v[16];
    detail::rows_rotate(in, cols, j, m, s, v);
    for (int r = 0; r < 16; ++r) _mm512_mask_storeu_ps(out + r * cols + j, m, _mm512_mul_ps(v[r], _mm512_set1_ps(0.25f)));
  }
}

// The transform of 16 values g[0], g[stride], ..., g[15 stride], in place.
void group_scalar(float* g, int64_t stride, const float* s) {
  float v[16];
  for (int r = 0; r < 16; ++r) v[r] = g[r * stride] * s[r];
  for (int h = 1; h < 16; h *= 2)
    for (int i = 0; i < 16; i += 2 * h)
      for (int k = i; k < i + h; ++k) {
        const float a = v[k], b = v[k + h];
        v[k] = a + b;
        v[k + h] = a - b;
      }
  for (int r = 0; r < 16; ++r) g[r * stride] = v[r] * 0.25f;
}

void rows_group_scalar(const float* in, float* out, int64_t cols, const float* s) {
  if (in != out) std::copy(in, in + 16 * cols, out);
  for (int64_t j = 0; j < cols; ++j) group_scalar(out + j, cols, s);
}

// ---- along columns: one row, 16 lanes a group ------------------------------------------------
// Running max of |v| and the lanes that are inf/NaN (|v| > the largest float, or unordered).
struct AbsMax {
  __m512 max;
  __mmask16 bad = 0;
};
__attribute__((target("avx512f"))) inline void add_abs(AbsMax& a, __m512 v, __mmask16 m) {
  const __m512 x = _mm512_maskz_mov_ps(m, _mm512_abs_ps(v));
  a.bad |= _mm512_mask_cmp_ps_mask(m, x, _mm512_set1_ps(3.4028234663852886e38f), _CMP_NLE_UQ);
  a.max = _mm512_max_ps(a.max, x);
}

__attribute__((target("avx512f"))) void cols_row_avx512(const float* in, float* out, int64_t cols, const float* s) {
  const __m512 sv = _mm512_loadu_ps(s);
  const int64_t full = cols / 16 * 16;
  for (int64_t j = 0; j < full; j += 16)
    _mm512_storeu_ps(out + j,
                     _mm512_mul_ps(detail::butterflies16(_mm512_mul_ps(_mm512_loadu_ps(in + j), sv)), _mm512_set1_ps(0.25f)));
  if (in != out) std::copy(in + full, in + cols, out + full);
}

void cols_row_scalar(const float* in, float* out, int64_t cols, const float* s) {
  if (in != out) std::copy(in, in + cols, out);
  for (int64_t j = 0; j + 16 <= cols; j += 16) group_scalar(out + j, 1, s);
}

// The pieces of one instruction set: one group along rows, one row along columns.
struct Path {
  void (*rows_group)(const float*, float*, int64_t, const float*);
  void (*cols_row)(const float*, float*, int64_t, const float*);
};
const Path kAvx512{rows_group_avx512, cols_row_avx512}, kAvx2{detail::hadamard_avx2::rows_group,
                                                               detail::hadamard_avx2::cols_row},
    kScalar{rows_group_scalar, cols_row_scalar};

// Ordered, best first (cpu::select).
const cpu::Impl<const Path*> kPaths[] = {
    {"avx512:hadamard16", cpu::Isa::avx512, &kAvx512},
    {"avx2:hadamard16", cpu::Isa::avx2, &kAvx2},
    {"scalar:hadamard16", cpu::Isa::scalar, &kScalar},
};
const Path& vector_path() { return *cpu::select(kPaths).fn; }

// Rows [r0, r1) of the result (r0 a multiple of 16 along rows).
void transform_rows(const float* in, float* out, int64_t r0, int64_t r1, int64_t rows, int64_t cols, int axis,
                    const float* s, const Path& path) {
  if (axis == 2) {
    for (int64_t i = r0; i < r1; ++i) path.cols_row(in + i * cols, out + i * cols, cols, s);
    return;
  }
  for (int64_t i = r0; i < r1; i += 16) {
    if (i + 16 <= rows) path.rows_group(in + i * cols, out + i * cols, cols, s);
    else if (in != out) std::copy(in + i * cols, in + rows * cols, out + i * cols);
  }
}

// Largest |value| of rows [0, rows) of the rotated x, nothing stored (rows <= 16;
// along rows a group shorter than 16 counts unrotated).
__attribute__((target("avx512f"))) float amax_avx512(const float* in, int64_t rows, int64_t cols, int axis,
                                                     const float* s, bool* nonfinite) {
  AbsMax a{_mm512_setzero_ps()};
  if (axis == 1 && rows == 16) {
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = column_mask(cols, j);
      __m512 v[16];
      detail::rows_rotate(in, cols, j, m, s, v);
      for (int r = 0; r < 16; ++r) add_abs(a, _mm512_mul_ps(v[r], _mm512_set1_ps(0.25f)), m);
    }
  } else {
    const __m512 sv = _mm512_loadu_ps(s);
    const int64_t full = axis == 2 ? cols / 16 * 16 : 0;
    for (int64_t i = 0; i < rows; ++i) {
      const float* row = in + i * cols;
      for (int64_t j = 0; j < full; j += 16)
        add_abs(a, _mm512_mul_ps(detail::butterflies16(_mm512_mul_ps(_mm512_loadu_ps(row + j), sv)), _mm512_set1_ps(0.25f)),
                0xFFFF);
      for (int64_t j = full; j < cols; j += 16) add_abs(a, _mm512_maskz_loadu_ps(column_mask(cols, j), row + j), column_mask(cols, j));
    }
  }
  *nonfinite = a.bad != 0;
  return _mm512_reduce_max_ps(a.max);
}

}  // namespace

namespace detail {
float hadamard16_amax(const float* in, int64_t rows, int64_t cols, int axis, const float* signs, bool* nonfinite) {
  const Path& path = vector_path();
  if (&path == &kAvx512) return amax_avx512(in, rows, cols, axis, signs, nonfinite);
  if (&path == &kAvx2) return detail::hadamard_avx2::amax(in, rows, cols, axis, signs, nonfinite);
  std::vector<float> buf(static_cast<size_t>(rows * cols));
  transform_rows(in, buf.data(), 0, rows, rows, cols, axis, signs, kScalar);
  float m = 0;
  bool bad = false;
  for (float v : buf) {
    bad = bad || !(std::fabs(v) <= 3.4028234663852886e38f);
    m = std::max(m, std::fabs(v));
  }
  *nonfinite = bad;
  return m;
}

void hadamard16_serial(const float* in, float* out, int64_t rows, int64_t cols, int axis, const float* signs) {
  transform_rows(in, out, 0, rows, rows, cols, axis, signs, vector_path());
}
}  // namespace detail

void hadamard16(const float* in, float* out, int64_t rows, int64_t cols, int axis, const float* signs) {
  if (axis != 1 && axis != 2)
    throw std::invalid_argument("hadamard16: axis must be 1 (rows) or 2 (columns), got " + std::to_string(axis));
  if (rows < 0 || cols < 0) throw std::invalid_argument("hadamard16: negative shape");
  const Path& path = vector_path();
  const int64_t chunks = (rows + 15) / 16;  // 16 rows a chunk on either axis
#pragma omp parallel for schedule(static) if (rows * cols >= 65536)
  for (int64_t c = 0; c < chunks; ++c)
    transform_rows(in, out, c * 16, std::min(rows, c * 16 + 16), rows, cols, axis, signs, path);
}

}  // namespace mantissa::formats
