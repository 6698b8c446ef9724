// Activations kept for the backward pass (Tape::save / restore). 16-bit
// policies round to the dtype; 1-byte policies (FP8 recipes: the forward cast
// format) keep codes with one power-of-two scale per tensor from the tensor's
// own amax, as Transformer Engine's current scaling: value = decode(code) x
// 2^E with E minimal such that amax x 2^-E <= the format's max. The scale is
// a power of two, so decoding is exact, also to bf16 (every e4m3/e5m2 value
// times 2^E is a bf16 value while 2^E stays in bf16's range, which the clamp
// of E to [-100, 100] and FP8's 2^-17 .. 2^16 magnitudes guarantee).
// Encoding is one pass that scales and rounds in registers
// (formats::ScaledCast) with the exponent the save site used last time
// (SavedScaleHints), again only when the pass's amax calls for another one
// (a first save scans the amax first); decoding a table lookup with the scale
// folded in (formats::lookup16), both in L1-sized chunks across threads.
// Every save that rounds (16-bit copies, 1-byte codes) is shown to the
// policy's SaveObserver, if any, after it is made.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "mantissa/autograd/tape.hpp"
#include "mantissa/formats/lookup.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/formats/scaled_cast.hpp"
#include "mantissa/formats/scaled_copy.hpp"
#include "mantissa/cpu/profile.hpp"
#include "mantissa/tensor/memory_trace.hpp"

namespace mantissa::autograd {
namespace {

constexpr int64_t kChunk = 4096;  // elements per piece of work (fits L1 with its codes)

const formats::Format& format_of(DType t) { return formats::preset(dtype_format_name(t)); }

// code -> bf16 bits of a 1-byte dtype (exact: FP8 values have <= 4 significant
// bits and bf16's exponent range); Tape::decode_table.
const formats::Table16& bf16_table(DType t) {
  static const auto tables = [] {
    std::array<formats::Table16, 4> all{};
    for (int i = 0; i < 4; ++i) {
      const formats::Format& f = format_of(static_cast<DType>(static_cast<int>(DType::e4m3fn) + i));
      for (uint32_t c = 0; c < 256; ++c)
        all[static_cast<size_t>(i)][c] = static_cast<uint16_t>(std::bit_cast<uint32_t>(formats::decode_f32(f, c)) >> 16);
    }
    return all;
  }();
  const int i = static_cast<int>(t) - static_cast<int>(DType::e4m3fn);
  if (i < 0 || i >= 4) throw std::invalid_argument(std::string("no FP8 decode table for dtype ") + dtype_name(t));
  return tables[static_cast<size_t>(i)];
}

// Runs fn(begin, length) over [0, n) in kChunk pieces, across threads when large.
template <class Fn>
void chunks(int64_t n, Fn fn) {
#pragma omp parallel for schedule(static) if (n > 16 * kChunk)
  for (int64_t b = 0; b < n; b += kChunk) fn(b, std::min(kChunk, n - b));
}

// out[i] = the bf16 value in[i] (exact).
void widen(float* out, const uint16_t* in, int64_t m) {
  for (int64_t i = 0; i < m; ++i) out[i] = std::bit_cast<float>(static_cast<uint32_t>(in[i]) << 16);
}

// What a 1-byte save encodes: x (f32 or bf16), less each row's mean when
// `row_mean` is set (layer norm's centred input; x f32 of rows of `cols`).
struct Source {
  const Tensor& x;
  const float* row_mean = nullptr;
  int64_t cols = 1;
  int64_t numel() const { return x.numel(); }
  // Chunk [b, b + m) as f32: x itself, or widened / centred into buf.
  const float* chunk(int64_t b, int64_t m, float* buf) const {
    if (row_mean) {
      const float* xp = x.f32() + b;
      for (int64_t i = 0; i < m;) {  // row by row: one mean per stretch
        const int64_t r = (b + i) / cols, end = std::min(m, (r + 1) * cols - b);
        const float mu = row_mean[r];
        for (; i < end; ++i) buf[i] = xp[i] - mu;
      }
      return buf;
    }
    if (x.dtype() == DType::f32) return x.f32() + b;
    widen(buf, x.data<uint16_t>() + b, m);
    return buf;
  }
};

// The largest |x| over x's chunks as scan(chunk, begin, length) reports them
// (a formats::ScanTotals), across threads. A chunk holding inf does not
// count: its gradients will be non-finite whatever the scale (the cast keeps
// inf/NaN non-finite) and amp skips the step.
template <class Scan>
float finite_amax_over(const Source& x, Scan scan) {
  const int64_t n = x.numel();
  const float inf = std::numeric_limits<float>::infinity();
  float amax = 0;
#pragma omp parallel for reduction(max : amax) schedule(static) if (n > 16 * kChunk)
  for (int64_t b = 0; b < n; b += kChunk) {
    alignas(64) float buf[kChunk];
    const int64_t m = std::min(kChunk, n - b);
    const formats::ScanTotals t = scan(x.chunk(b, m, buf), b, static_cast<size_t>(m));
    if (t.amax < inf) amax = std::max(amax, t.amax);
  }
  return amax;
}

// Largest |x| for the scale (formats::scaled_copy's vector scan).
float finite_amax(const Source& x) {
  return finite_amax_over(x, [](const float* chunk, int64_t, size_t m) {
    return formats::scaled_copy(chunk, nullptr, m, 1.0f, std::numeric_limits<float>::infinity());
  });
}

// Minimal E with amax x 2^-E <= max (0 for amax 0).
int scale_exponent(double amax, double max) {
  if (!(amax > 0)) return 0;
  int e = std::ilogb(amax) - std::ilogb(max);
  while (std::ldexp(amax, -e) > max) ++e;
  while (std::ldexp(amax, -(e - 1)) <= max) --e;
  return std::clamp(e, -100, 100);
}

}  // namespace

// A 1-byte policy gives a bf16 copy here: callers that read the copy without
// its scale (a matrix product's kept operand) stay correct; the ops that
// restore through Tape call save_compact.
Tensor Tape::save(const Tensor& x) {
  const DType s = dtype_size(ctx_.policy.saved) == 1 ? DType::bf16 : ctx_.policy.saved;
  if (s == DType::f32 || x.dtype() != DType::f32) return x;
  MemoryLabel label("saved");
  Tensor out = x.to(s, MemoryKind::activation);
  const uint64_t site = ctx_.copy_saves++;
  if (SaveObserver* o = ctx_.policy.save_observer.get()) o->saved_copy(site, x, out);
  return out;
}

namespace {
Tensor encode_source(const Source& x, DType codes, int* hint, bool* reencoded) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  const formats::Format& f = format_of(codes);
  Tensor out = Tensor::empty(x.x.shape(), codes, MemoryKind::activation);
  const formats::ScaledCast cast(f, false, bf16_table(codes));  // nearest-even, inf/NaN stay non-finite
  uint8_t* dst = out.data<uint8_t>();
  // Encodes x with 2^-e and returns its amax as finite_amax does (the cast
  // scans the same chunks the same way).
  const auto encode = [&](int e) {
    const float mult = std::ldexp(1.0f, -e);
    return finite_amax_over(x, [&](const float* chunk, int64_t b, size_t m) {
      return cast.run(chunk, m, &mult, m, dst + b, nullptr);
    });
  };
  int e = 0;
  if (reencoded) *reencoded = false;
  if (hint && *hint != SavedScaleHints::kNone) {
    e = scale_exponent(encode(*hint), f.max());
    if (reencoded) *reencoded = e != *hint;
    if (e != *hint) encode(e);
  } else {
    e = scale_exponent(finite_amax(x), f.max());
    encode(e);
  }
  if (hint) *hint = e;
  out.set_scale(std::ldexp(1.0f, e));
  return out;
}
}  // namespace

Tensor Tape::encode_scaled(const Tensor& x, DType codes, int* hint, bool* reencoded) {
  if (x.dtype() != DType::f32 && x.dtype() != DType::bf16)
    throw std::invalid_argument(std::string("Tape::encode_scaled: input must be f32 or bf16, got ") + dtype_name(x.dtype()));
  return encode_source(Source{x}, codes, hint, reencoded);
}

Tensor Tape::save_compact(const Tensor& x) {
  const DType s = ctx_.policy.saved;
  if (dtype_size(s) != 1) return save(x);
  if (x.dtype() != DType::f32 && x.dtype() != DType::bf16) return x;
  return save_source(x, nullptr, 1);
}

Tensor Tape::save_centered(const Tensor& x, const Tensor& row_mean) {
  if (dtype_size(ctx_.policy.saved) != 1) throw std::logic_error("Tape::save_centered: the policy's saves are not 1-byte");
  const int64_t cols = x.ndim() ? x.dim(-1) : 0;
  if (x.dtype() != DType::f32 || row_mean.dtype() != DType::f32 || row_mean.numel() * cols != x.numel())
    throw std::invalid_argument("Tape::save_centered: x " + shape_str(x.shape()) + " and row means " +
                                shape_str(row_mean.shape()) + " do not match (both f32)");
  return save_source(x, row_mean.f32(), cols);
}

// Through the policy's hints when it has them.
Tensor Tape::save_source(const Tensor& t, const float* row_mean, int64_t cols) {
  const Source x{t, row_mean, cols};
  const DType s = ctx_.policy.saved;
  MemoryLabel label("saved");
  SavedScaleHints* hints = ctx_.policy.saved_hints.get();
  const auto site = static_cast<size_t>(ctx_.save_calls++);
  Tensor out;
  if (!hints) {
    out = encode_source(x, s, nullptr, nullptr);
  } else {
    if (hints->exponent.size() <= site) hints->exponent.resize(site + 1, SavedScaleHints::kNone);
    bool again = false;
    out = encode_source(x, s, &hints->exponent[site], &again);
    ++hints->saves;
    hints->reencodes += again;
  }
  if (SaveObserver* o = ctx_.policy.save_observer.get()) o->saved(site, t, row_mean, cols, out);
  return out;
}

const std::array<uint16_t, 256>& Tape::decode_table(DType codes) { return bf16_table(codes); }

Tensor Tape::restore(const Tensor& saved) {
  if (saved.dtype() == DType::f32) return saved;
  if (dtype_size(saved.dtype()) != 1) return saved.to(DType::f32, MemoryKind::workspace);
  cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  Tensor out = Tensor::empty(saved.shape(), DType::f32, MemoryKind::workspace);
  const formats::Table16& table = bf16_table(saved.dtype());
  const float s = saved.scale();
  chunks(saved.numel(), [&](int64_t b, int64_t m) {
    formats::lookup16_widen(table, saved.data<uint8_t>() + b, out.f32() + b, static_cast<size_t>(m), &s,
                            static_cast<size_t>(m));
  });
  return out;
}

Tensor Tape::restore_bf16(const Tensor& saved) {
  if (saved.dtype() == DType::bf16) return saved;
  if (dtype_size(saved.dtype()) != 1) throw std::logic_error("Tape::restore_bf16: saved tensor is not bf16 or 1-byte");
  cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  Tensor out = Tensor::empty(saved.shape(), DType::bf16, MemoryKind::workspace);
  const formats::Table16& table = bf16_table(saved.dtype());
  const float s = saved.scale();
  chunks(saved.numel(), [&](int64_t b, int64_t m) {  // exact (see the top of this file)
    formats::lookup16(table, saved.data<uint8_t>() + b, out.data<uint16_t>() + b, static_cast<size_t>(m), &s,
                      static_cast<size_t>(m));
  });
  return out;
}

}  // namespace mantissa::autograd
