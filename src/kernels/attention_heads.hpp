// Head layout helpers shared by the attention kernels (attention.cpp, the
// whole-scores path, and attention_blockwise.cpp): shapes, matmul operand
// buffers and the gather/scatter between qkv [B, T, 3C] rows and contiguous
// per-head [B*NH, T, hs] matrices.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/parallel.hpp"
#include "kernels/row_math.hpp"
#include "mantissa/tensor/tensor.hpp"

namespace mantissa::kernels::attention_detail {

struct Dims {
  int64_t B, T, C, NH, hs;
  int64_t heads() const { return B * NH; }
  int64_t head_elems() const { return B * NH * T * hs; }
};

inline Dims check_dims(int64_t B, int64_t T, int64_t C, int64_t NH) {
  if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH != 0) {
    throw std::invalid_argument("attention: bad shape B=" + std::to_string(B) + " T=" + std::to_string(T) +
                                " C=" + std::to_string(C) + " NH=" + std::to_string(NH) +
                                " (C must be a multiple of NH)");
  }
  return {B, T, C, NH, C / NH};
}

// A matmul operand buffer: fp32 or bf16 codes, reused across calls.
struct Buffer {
  std::vector<float> f32;
  std::vector<uint16_t> b16;
  bool bf16 = false;
  void prepare(int64_t n, bool use_bf16) {
    bf16 = use_bf16;
    if (bf16) {
      b16.resize(static_cast<size_t>(n));
    } else {
      f32.resize(static_cast<size_t>(n));
    }
  }
  const void* data() const { return bf16 ? static_cast<const void*>(b16.data()) : f32.data(); }
  // The operand starting `at` elements in.
  const void* data(int64_t at) const {
    return bf16 ? static_cast<const void*>(b16.data() + at) : static_cast<const void*>(f32.data() + at);
  }
  DType type() const { return bf16 ? DType::bf16 : DType::f32; }
  void store(int64_t at, const float* src, int64_t n) {
    if (bf16) {
      span_to_bf16(b16.data() + at, src, n);
    } else {
      std::copy_n(src, n, f32.data() + at);
    }
  }
};

// src [B, T, stride] with head h at column offset + h*hs  ->  dst [B, NH, T, hs]
inline void gather_heads(Buffer& dst, const float* src, int64_t stride, int64_t offset, const Dims& d, bool bf16) {
  dst.prepare(d.head_elems(), bf16);
#pragma omp parallel for schedule(static) if (parallel_rows(d.B * d.T, d.C))
  for (int64_t bt = 0; bt < d.B * d.T; ++bt) {
    const int64_t b = bt / d.T, t = bt % d.T;
    const float* row = src + bt * stride + offset;
    for (int64_t h = 0; h < d.NH; ++h) dst.store(((b * d.NH + h) * d.T + t) * d.hs, row + h * d.hs, d.hs);
  }
}

// dst [B, T, stride] (+)= src [B, NH, T, hs] at column offset + h*hs
inline void scatter_heads(float* dst, const float* src, int64_t stride, int64_t offset, const Dims& d,
                          bool accumulate) {
#pragma omp parallel for schedule(static) if (parallel_rows(d.B * d.T, d.C))
  for (int64_t bt = 0; bt < d.B * d.T; ++bt) {
    const int64_t b = bt / d.T, t = bt % d.T;
    float* row = dst + bt * stride + offset;
    for (int64_t h = 0; h < d.NH; ++h) {
      const float* s = src + ((b * d.NH + h) * d.T + t) * d.hs;
      float* o = row + h * d.hs;
      if (accumulate) {
#pragma omp simd
        for (int64_t j = 0; j < d.hs; ++j) o[j] += s[j];
      } else {
        std::copy_n(s, d.hs, o);
      }
    }
  }
}

// The keys query row t of head `head` (of B*NH) keeps: causal (key_len null)
// keys 0..t, else its sequence's first key_len[head / NH] keys (right padding;
// rows of padded queries keep the same keys as the sequence's other rows).
inline int64_t kept_keys(const int32_t* key_len, int64_t head, int64_t t, int64_t NH) {
  return key_len ? key_len[head / NH] : t + 1;
}

// Throws unless every key length is in [1, T]; returns the longest.
inline int64_t check_key_len(const int32_t* key_len, int64_t B, int64_t T) {
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (key_len[b] < 1 || key_len[b] > T)
      throw std::invalid_argument("attention: key length " + std::to_string(key_len[b]) + " of sequence " +
                                  std::to_string(b) + " is outside [1, " + std::to_string(T) + "]");
    longest = std::max<int64_t>(longest, key_len[b]);
  }
  return longest;
}

}  // namespace mantissa::kernels::attention_detail
