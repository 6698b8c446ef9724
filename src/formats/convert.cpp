// Bulk conversion front end: picks a kernel from an ordered list by
// instruction set (best first, capped by cpu::set_max_isa / MANTISSA_MAX_ISA),
// splits large arrays across OpenMP threads, and records the kernel name.
#include "mantissa/formats/convert.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "formats/convert_avx2.hpp"
#include "formats/convert_plan.hpp"
#include "mantissa/cpu/isa.hpp"

namespace mantissa::formats {

namespace {

using detail::QuantPlan;
using detail::Shape;

size_t parse_stream_env() {
  constexpr size_t kDefault = size_t{4} << 20;
  const char* s = std::getenv("MANTISSA_STREAM_MIN_BYTES");
  if (s == nullptr || *s == '\0') return kDefault;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (*end != '\0' || *s == '-') {
    std::fprintf(stderr, "mantissa: MANTISSA_STREAM_MIN_BYTES=%s is not a byte count; ignored\n", s);
    return kDefault;
  }
  return static_cast<size_t>(v);
}

std::atomic<size_t>& stream_threshold() {
  static std::atomic<size_t> bytes{parse_stream_env()};
  return bytes;
}

bool verbose() {
  static const bool v = [] {
    const char* s = std::getenv("MANTISSA_VERBOSE");
    return s != nullptr && s[0] != '\0' && s[0] != '0';
  }();
  return v;
}

// What the last call on this thread ran; the name is built only when asked
// for, so a call on a small array does not pay for string concatenation.
struct KernelNote {
  const char* kernel = nullptr;  // a string literal
  std::string format;            // assigned in place: no allocation once it has grown
  Round mode = Round::nearest_even;
  bool with_mode = false;
};
thread_local KernelNote t_note;

std::string note_text(const KernelNote& k) {
  if (k.kernel == nullptr) return "none";
  std::string s = std::string(k.kernel) + ":" + k.format;
  if (k.with_mode) s += std::string(":") + round_name(k.mode);
  return s;
}

void note_kernel(const char* op, const char* kernel, const QuantPlan& p, size_t n, bool with_mode) {
  t_note.kernel = kernel;
  t_note.format.assign(p.format->name);
  t_note.mode = p.opt.mode;
  t_note.with_mode = with_mode;
  if (verbose())
    std::fprintf(stderr, "mantissa: %s %s n=%zu kernel=%s\n", op, p.format->name.c_str(), n,
                 note_text(t_note).c_str());
}

// Ordered tables, best first (cpu::select). The hardware converters only
// where they give the reference's bits: nearest-even, no saturation, no
// flushing (their subnormal inputs and NaN payloads are fixed up inside the
// kernel).
bool plain_rne(const QuantPlan& p) {
  return p.opt.mode == Round::nearest_even && !p.opt.saturate && !p.opt.flush_subnormals;
}

using QuantImpl = cpu::Impl<detail::QuantKernel, QuantPlan>;
const QuantImpl kQuantize[] = {
    {"avx512_bf16:cvtneps2bf16", cpu::Isa::avx512_bf16, detail::quantize_avx512_bf16_hw,
     [](const QuantPlan& p) { return p.shape == Shape::bf16 && plain_rne(p); }},
    {"avx512:cvtps2ph", cpu::Isa::avx512, detail::quantize_avx512_fp16_hw,
     [](const QuantPlan& p) { return p.shape == Shape::fp16 && plain_rne(p); }},
    {"avx512:via_fp16", cpu::Isa::avx512, detail::quantize_avx512_small,
     [](const QuantPlan& p) { return p.shape == Shape::generic && detail::small_route(p); }},
    {"avx512:generic", cpu::Isa::avx512, detail::quantize_avx512_generic,
     [](const QuantPlan& p) { return p.shape != Shape::scalar_only; }},
    {"avx2:cvtps2ph", cpu::Isa::avx2, detail::quantize_avx2_fp16_hw,
     [](const QuantPlan& p) { return p.shape == Shape::fp16 && plain_rne(p); }},
    {"avx2:via_fp16", cpu::Isa::avx2, detail::quantize_avx2_small,
     [](const QuantPlan& p) { return p.shape == Shape::generic && detail::small_route(p); }},
    {"avx2:generic", cpu::Isa::avx2, detail::quantize_avx2_generic,
     [](const QuantPlan& p) { return p.shape != Shape::scalar_only; }},
    {"scalar", cpu::Isa::scalar, detail::quantize_scalar, nullptr},
};

// One-pass fake quantisation; the last entry (no kernel) rounds through codes
// in a small buffer with the quantize and dequantize kernels.
using FakeImpl = cpu::Impl<detail::FakeKernel, QuantPlan>;
const FakeImpl kFakeQuantize[] = {
    {"avx512_bf16:cvtneps2bf16+widen", cpu::Isa::avx512_bf16, detail::fake_quantize_avx512_bf16_hw,
     [](const QuantPlan& p) { return p.shape == Shape::bf16 && plain_rne(p); }},
    {"avx512:cvtps2ph+cvtph2ps", cpu::Isa::avx512, detail::fake_quantize_avx512_fp16_hw,
     [](const QuantPlan& p) { return p.shape == Shape::fp16 && plain_rne(p); }},
    {"avx2:cvtps2ph+cvtph2ps", cpu::Isa::avx2, detail::fake_quantize_avx2_fp16_hw,
     [](const QuantPlan& p) { return p.shape == Shape::fp16 && plain_rne(p); }},
    {"round_trip", cpu::Isa::scalar, nullptr, nullptr},
};

using DequantImpl = cpu::Impl<detail::DequantKernel, QuantPlan>;
const DequantImpl kDequantize[] = {
    {"avx512:decode", cpu::Isa::avx512, detail::dequantize_avx512,
     [](const QuantPlan& p) { return p.shape != Shape::scalar_only; }},
    {"avx2:decode", cpu::Isa::avx2, detail::dequantize_avx2,
     [](const QuantPlan& p) { return p.shape != Shape::scalar_only; }},
    {"scalar", cpu::Isa::scalar, detail::dequantize_scalar, nullptr},
};

detail::QuantKernel pick_quantize(const QuantPlan& p, const char** name) {
  const QuantImpl& impl = cpu::select(kQuantize, p);
  *name = impl.name;
  return impl.fn;
}

detail::DequantKernel pick_dequantize(const QuantPlan& p, const char** name) {
  const DequantImpl& impl = cpu::select(kDequantize, p);
  *name = impl.name;
  return impl.fn;
}

// Chunks are multiples of 64 elements so every thread starts aligned to a
// cache line of codes; the stochastic draw depends on the global index only.
template <class Body>
void parallel_chunks(size_t n, Body body) {
  if (n < kParallelThreshold || omp_get_max_threads() == 1) {
    body(size_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const size_t threads = static_cast<size_t>(omp_get_num_threads());
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t chunk = ((n + threads - 1) / threads + 63) / 64 * 64;
    const size_t begin = std::min(n, t * chunk);
    const size_t end = std::min(n, begin + chunk);
    if (begin < end) body(begin, end - begin);
  }
}

}  // namespace

std::string last_kernel() { return note_text(t_note); }

size_t detail::stream_min_bytes() { return stream_threshold().load(); }

void detail::set_stream_min_bytes(size_t bytes) { stream_threshold().store(bytes); }

void quantize(const Format& f, const float* in, void* codes, size_t n, const RoundOptions& opt) {
  QuantPlan p = detail::make_plan(f, opt);
  const size_t bytes = static_cast<size_t>(p.bytes);
  p.stream = n * bytes >= detail::stream_min_bytes();
  const char* name = "scalar";
  const detail::QuantKernel k = pick_quantize(p, &name);
  note_kernel("quantize", name, p, n, true);
  auto* out = static_cast<uint8_t*>(codes);
  parallel_chunks(n, [&](size_t begin, size_t len) { k(p, in + begin, out + begin * bytes, len, begin); });
}

void dequantize(const Format& f, const void* codes, float* out, size_t n) {
  const QuantPlan p = detail::make_plan(f, RoundOptions{});
  const char* name = "scalar";
  const detail::DequantKernel k = pick_dequantize(p, &name);
  note_kernel("dequantize", name, p, n, false);
  const auto* c = static_cast<const uint8_t*>(codes);
  const size_t bytes = static_cast<size_t>(p.bytes);
  parallel_chunks(n, [&](size_t begin, size_t len) { k(p, c + begin * bytes, out + begin, len); });
}

void fake_quantize(const Format& f, const float* in, float* out, size_t n, const RoundOptions& opt) {
  QuantPlan p = detail::make_plan(f, opt);
  const FakeImpl& fused = cpu::select(kFakeQuantize, p);
  if (fused.fn) {
    p.stream = n * sizeof(float) >= detail::stream_min_bytes() && in != out;
    note_kernel("fake_quantize", fused.name, p, n, true);
    parallel_chunks(n, [&](size_t begin, size_t len) { fused.fn(p, in + begin, out + begin, len, begin); });
    return;
  }
  const char* qname = "scalar";
  const char* dname = "scalar";
  const detail::QuantKernel qk = pick_quantize(p, &qname);
  const detail::DequantKernel dk = pick_dequantize(p, &dname);
  note_kernel("fake_quantize", qname, p, n, true);
  // Codes round-trip through a small per-thread buffer that stays in L1/L2,
  // so fake quantisation reads and writes the fp32 array once.
  constexpr size_t kBlock = 2048;
  parallel_chunks(n, [&](size_t begin, size_t len) {
    alignas(64) uint8_t buf[kBlock * 4];
    for (size_t off = 0; off < len; off += kBlock) {
      const size_t m = std::min(kBlock, len - off);
      qk(p, in + begin + off, buf, m, begin + off);
      dk(p, buf, out + begin + off, m);
    }
  });
}

}  // namespace mantissa::formats
