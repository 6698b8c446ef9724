// Elementwise kernels, activations, dropout and reductions: flat loops that
// GCC vectorises (omp simd), split across threads above a size threshold.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/formats/bf16.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/lookup.hpp"
#include "kernels/gelu_erf.hpp"
#include "kernels/parallel.hpp"
#include "kernels/row_math.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/cpu/profile.hpp"

namespace mantissa::kernels {

#define MANTISSA_PARALLEL_SIMD _Pragma("omp parallel for simd schedule(static) if (n >= kParallelElements)")

void add(float* out, const float* a, const float* b, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  MANTISSA_PARALLEL_SIMD
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* acc, const float* x, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  MANTISSA_PARALLEL_SIMD
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

void scale(float* out, const float* x, float alpha, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  MANTISSA_PARALLEL_SIMD
  for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i];
}

void axpy(float* acc, const float* x, float alpha, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  MANTISSA_PARALLEL_SIMD
  for (int64_t i = 0; i < n; ++i) acc[i] += alpha * x[i];
}

void mul(float* out, const float* a, const float* b, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  MANTISSA_PARALLEL_SIMD
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

// Two loops, not a select on `accumulate` inside one (it keeps GCC from vectorising).
void axpby(float* out, const float* a, float alpha, const float* b, float beta, int64_t n, bool accumulate) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  if (accumulate) {
    MANTISSA_PARALLEL_SIMD
    for (int64_t i = 0; i < n; ++i) out[i] += alpha * a[i] + beta * b[i];
  } else {
    MANTISSA_PARALLEL_SIMD
    for (int64_t i = 0; i < n; ++i) out[i] = alpha * a[i] + beta * b[i];
  }
}

void scale_segments(float* out, const float* x, const float* scales, int segs, int64_t rows, int64_t C,
                    bool accumulate) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  const int64_t width = segs * C;
#pragma omp parallel for schedule(static) if (rows * width >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r)
    for (int s = 0; s < segs; ++s) {
      const float k = scales[s];
      float* o = out + r * width + s * C;
      const float* in = x + r * width + s * C;
      if (accumulate) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) o[c] += k * in[c];
      } else {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) o[c] = k * in[c];
      }
    }
}

// ---- SwiGLU ------------------------------------------------------------------------
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n, float alpha) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  for_chunks(n, [&](int64_t b, int64_t e) { span_swiglu_forward(out + b, gate + b, up + b, e - b, alpha); });
}

void swiglu_backward(float* dgate, float* dup, const float* gate, const float* up, const float* dy, int64_t n,
                     float alpha, float beta) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  for_chunks(n, [&](int64_t b, int64_t e) {
    span_swiglu_backward(dgate ? dgate + b : nullptr, dup ? dup + b : nullptr, gate + b, up + b, dy + b, e - b, alpha,
                         beta);
  });
}

// gate and up kept as bf16 codes: widened block by block on the stack, the
// same bits as widening them first.
void swiglu_backward_bf16x(float* dgate, float* dup, const uint16_t* gate16, const uint16_t* up16, const float* dy,
                           int64_t n, float alpha, float beta) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  for_chunks(n, [&](int64_t b, int64_t e) {
    constexpr int64_t kBlock = 1024;
    alignas(64) float g[kBlock];
    alignas(64) float u[kBlock];
    for (int64_t i = b; i < e; i += kBlock) {
      const int64_t m = std::min(kBlock, e - i);
      span_from_bf16(g, gate16 + i, m);
      span_from_bf16(u, up16 + i, m);
      span_swiglu_backward(dgate ? dgate + i : nullptr, dup ? dup + i : nullptr, g, u, dy + i, m, alpha, beta);
    }
  });
}

// ---- GELU: tanh form vectorised in row_math.cpp, erf form in gelu_erf.cpp ----------
namespace {
void gelu_span_forward(float* out, const float* x, int64_t n, float scale, GeluForm form) {
  if (form == GeluForm::erf) span_gelu_erf_forward(out, x, n, scale);
  else span_gelu_forward(out, x, n, scale);
}
void gelu_span_backward(float* dx, const float* x, const float* dout, int64_t n, bool accumulate, float scale,
                        GeluForm form) {
  if (form == GeluForm::erf) span_gelu_erf_backward(dx, x, dout, n, accumulate, scale);
  else span_gelu_backward(dx, x, dout, n, accumulate, scale);
}
}  // namespace

void gelu_forward(float* out, const float* x, int64_t n, float scale, GeluForm form) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  for_chunks(n, [&](int64_t b, int64_t e) { gelu_span_forward(out + b, x + b, e - b, scale, form); });
}

const char* gelu_implementation(GeluForm form) {
  return form == GeluForm::erf ? gelu_erf_implementation() : gelu_implementation();
}

namespace {
void gelu_backward_f32x(float* dx, const float* x, const float* dout, int64_t n, bool accumulate, float scale,
                        GeluForm form) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  for_chunks(n, [&](int64_t b, int64_t e) {
    gelu_span_backward(dx + b, x + b, dout + b, e - b, accumulate, scale, form);
  });
}

// x kept compact (bf16 or 1-byte saved activations): widened block by block
// on the stack by widen(out, begin, m) instead of into a whole fp32 copy;
// the same bits as widening first.
template <class Widen>
void gelu_backward_widened(float* dx, Widen widen, const float* dout, int64_t n, bool accumulate, float scale,
                           GeluForm form) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  for_chunks(n, [&](int64_t b, int64_t e) {
    constexpr int64_t kBlock = 1024;
    alignas(64) float x[kBlock];
    for (int64_t i = b; i < e; i += kBlock) {
      const int64_t m = std::min(kBlock, e - i);
      widen(x, i, m);
      gelu_span_backward(dx + i, x, dout + i, m, accumulate, scale, form);
    }
  });
}

void gelu_backward_16x(float* dx, const uint16_t* x16, const float* dout, int64_t n, bool accumulate, float scale,
                       GeluForm form) {
  gelu_backward_widened(dx, [x16](float* x, int64_t i, int64_t m) { span_from_bf16(x, x16 + i, m); }, dout, n,
                        accumulate, scale, form);
}
}  // namespace

void gelu_backward(float* dx, const float* x, const float* dout, int64_t n, float scale, GeluForm form) {
  gelu_backward_f32x(dx, x, dout, n, true, scale, form);
}
void gelu_backward_bf16x(float* dx, const uint16_t* x16, const float* dout, int64_t n, float scale, GeluForm form) {
  gelu_backward_16x(dx, x16, dout, n, true, scale, form);
}
void gelu_backward_into(float* dx, const float* x, const float* dout, int64_t n, float scale, GeluForm form) {
  gelu_backward_f32x(dx, x, dout, n, false, scale, form);
}
void gelu_backward_bf16x_into(float* dx, const uint16_t* x16, const float* dout, int64_t n, float scale,
                              GeluForm form) {
  gelu_backward_16x(dx, x16, dout, n, false, scale, form);
}
void gelu_backward_codes(float* dx, const uint8_t* codes, const formats::Table16& table, float fold,
                         const float* dout, int64_t n, bool accumulate, float scale, GeluForm form) {
  gelu_backward_widened(
      dx,
      [&](float* x, int64_t i, int64_t m) {
        formats::lookup16_widen(table, codes + i, x, static_cast<size_t>(m), &fold, static_cast<size_t>(m));
      },
      dout, n, accumulate, scale, form);
}

void relu_forward(float* out, const float* x, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  MANTISSA_PARALLEL_SIMD
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(float* dx, const float* x, const float* dout, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  MANTISSA_PARALLEL_SIMD
  for (int64_t i = 0; i < n; ++i) dx[i] += x[i] > 0.0f ? dout[i] : 0.0f;
}

// ---- dropout ---------------------------------------------------------------------
// Counter-based: the keep decision of element i depends only on (seed, offset, i)
// through a splitmix64 finaliser, so it is identical for any thread count and
// recomputable in backward without storing a mask.
namespace {
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void check_dropout_p(float p) {
  if (!(p >= 0.0f && p <= 1.0f)) {
    throw std::invalid_argument("dropout: probability must be in [0, 1], got " + std::to_string(p));
  }
}

// Keep with probability 1-p using 24 random bits: u in [0, 2^24), keep if u >= p 2^24.
inline bool dropout_keep(uint64_t stream, int64_t i, uint32_t threshold) {
  const uint64_t h = mix64(stream + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull);
  return static_cast<uint32_t>(h >> 40) >= threshold;
}

inline uint32_t dropout_threshold(float p) {
  return static_cast<uint32_t>(std::llround(static_cast<double>(p) * 16777216.0));
}

inline uint64_t dropout_stream(uint64_t seed, uint64_t offset) {
  return mix64(seed ^ mix64(offset + 0x632be59bd9b4e019ull));
}
}  // namespace

bool dropout_kept(float p, uint64_t seed, uint64_t offset, int64_t i) {
  return dropout_keep(dropout_stream(seed, offset), i, dropout_threshold(p));
}

void dropout_forward(float* out, const float* x, float p, uint64_t seed, uint64_t offset, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  check_dropout_p(p);
  const uint64_t stream = dropout_stream(seed, offset);
  const uint32_t threshold = dropout_threshold(p);
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    out[i] = dropout_keep(stream, i, threshold) ? x[i] * keep_scale : 0.0f;
  }
}

void dropout_backward(float* dx, const float* dout, float p, uint64_t seed, uint64_t offset, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  check_dropout_p(p);
  const uint64_t stream = dropout_stream(seed, offset);
  const uint32_t threshold = dropout_threshold(p);
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    if (dropout_keep(stream, i, threshold)) dx[i] += dout[i] * keep_scale;
  }
}

// ---- reductions --------------------------------------------------------------------
// Fixed blocks summed in double, then the block sums added in order: the result
// does not depend on the thread count.
namespace {
constexpr int64_t kReduceBlock = 4096;

template <class F>
double blocked_sum(int64_t n, F&& term) {
  const int64_t blocks = (n + kReduceBlock - 1) / kReduceBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t end = std::min(n, (b + 1) * kReduceBlock);
    double s = 0.0;
    for (int64_t i = b * kReduceBlock; i < end; ++i) s += term(i);
    partial[static_cast<size_t>(b)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}
}  // namespace

double sum(const float* x, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  return blocked_sum(n, [x](int64_t i) { return static_cast<double>(x[i]); });
}

double sum_squares(const float* x, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  return blocked_sum(n, [x](int64_t i) {
    const double v = x[i];
    return v * v;
  });
}

bool all_finite(const float* x, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::elementwise);
  int bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    // Exponent all ones <=> Inf or NaN; integer test survives -ffast-math.
    bad |= (std::bit_cast<uint32_t>(x[i]) & 0x7f800000u) == 0x7f800000u ? 1 : 0;
  }
  return bad == 0;
}

// ---- bf16 storage helpers -------------------------------------------------------------
// The formats module owns rounding: its bf16 path (AVX512-BF16 where present)
// is checked bit for bit against the scalar reference on all 2^32 inputs.
void f32_to_bf16(uint16_t* out, const float* in, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  formats::quantize(formats::preset("bf16"), in, out, static_cast<size_t>(n));
}

// bf16 -> f32 is exact: the code becomes the top half of the fp32 word (NaN
// payloads included), a shift GCC vectorises; no format machinery needed.
void bf16_to_f32(float* out, const uint16_t* in, int64_t n) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  for_chunks(n, [&](int64_t b, int64_t e) { span_from_bf16(out + b, in + b, e - b); });
}

// ---- threads ---------------------------------------------------------------------------
int num_threads() { return omp_get_max_threads(); }

int max_threads() {
  const int hw = omp_get_num_procs();
  return std::clamp(4 * hw, 64, 1024);
}

void set_num_threads(int64_t n) {
  // libgomp gives each thread its own stack: tens of thousands of threads
  // exhaust memory or the stack of the thread that starts them.
  if (n < 1 || n > max_threads())
    throw std::invalid_argument("--threads must be between 1 and " + std::to_string(max_threads()) +
                                " (4 per processor, at least 64), got " + std::to_string(n));
  // oneDNN is built with the OpenMP runtime and sizes its parallel regions
  // from omp_get_max_threads(), so this one call governs both.
  omp_set_num_threads(static_cast<int>(n));
}

}  // namespace mantissa::kernels
