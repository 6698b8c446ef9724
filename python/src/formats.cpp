// mantissa._core: number formats on arrays of any DLPack producer (numpy's
// direct path: fast.cpp). Every kernel on 16 Ki values or more runs with the
// GIL released, on the library's threads (formats/convert.hpp,
// formats/mx.hpp); inputs are read in place, outputs are new numpy arrays or
// the caller's `out`.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>

#include "arrays.hpp"
#include "formats.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/formats/mx.hpp"
#include "mantissa/formats/round.hpp"

namespace mantissa::py {

// Formats by spec, parsed once: a small array's call costs a map lookup, not a
// parse, and a repeat of the thread's previous spec not even the lock. Any
// number of spellings can be asked for, so at most kCachedFormats are kept and
// a full cache starts again; callers hold their format by shared_ptr, so one
// dropped from the cache mid-call stays alive.
namespace {
constexpr size_t kCachedFormats = 256;
std::mutex cache_mutex;
std::map<std::string, FormatPtr, std::less<>> cache;
}  // namespace

FormatPtr format_of(const std::string& spec) {
  thread_local std::string last_spec;
  thread_local FormatPtr last;
  if (last != nullptr && spec == last_spec) return last;
  FormatPtr f;
  {
    std::lock_guard lock(cache_mutex);
    if (auto it = cache.find(spec); it != cache.end()) f = it->second;
  }
  if (f == nullptr) {
    try {
      f = std::make_shared<const mf::Format>(mf::parse_format(spec));
    } catch (const std::invalid_argument& e) {
      throw nb::value_error((std::string("format: ") + e.what()).c_str());
    }
    std::lock_guard lock(cache_mutex);
    if (cache.size() >= kCachedFormats) cache.clear();
    cache.emplace(spec, f);
  }
  last_spec = spec;
  last = f;
  return f;
}

size_t format_cache_size() {
  std::lock_guard lock(cache_mutex);
  return cache.size();
}

mf::RoundOptions round_options(const std::string& round, bool saturate, bool flush, uint64_t seed, int random_bits) {
  mf::RoundOptions o;
  try {
    o.mode = round == "nearest-even" || round == "nearest" ? mf::Round::nearest_even : mf::parse_round(round);
  } catch (const std::invalid_argument& e) {
    throw nb::value_error((std::string("round: ") + e.what()).c_str());
  }
  if (random_bits < 1 || random_bits > 32)
    throw nb::value_error(("random_bits must be 1..32, got " + std::to_string(random_bits)).c_str());
  o.saturate = saturate;
  o.flush_subnormals = flush;
  o.seed = seed;
  o.random_bits = random_bits;
  return o;
}

// Formats of fewer than 8 bits keep one code per byte (or two per byte,
// packed): a byte or nibble beyond the format's last code is refused, not
// masked or decoded to NaN.
void check_code_range(const uint8_t* c, size_t n, const mf::Format& f, bool packed) {
  const uint32_t count = static_cast<uint32_t>(std::min<uint64_t>(f.code_count(), 256));
  if (count >= (packed ? 16u : 256u)) return;
  uint32_t worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max<uint32_t>(worst, packed ? std::max(c[i] & 0xF, c[i] >> 4) : c[i]);
  if (worst >= count)
    throw nb::value_error(("codes: " + std::to_string(worst) + " is not a " + f.name + " code (0.." +
                           std::to_string(count - 1) + ")")
                              .c_str());
}

namespace {

void check_array_codes(const In& codes, const mf::Format& f, bool packed) {
  check_code_range(static_cast<const uint8_t*>(codes.data()), codes.size(), f, packed);
}

nb::object quantize(const In& x, const std::string& spec, const std::string& round, bool saturate, bool flush,
                    uint64_t seed, int random_bits, std::optional<Out> out) {
  const float* in = f32_input(x);
  const FormatPtr fp = format_of(spec);
  const mf::Format& f = *fp;
  const mf::RoundOptions opt = round_options(round, saturate, flush, seed, random_bits);
  float* dst = nullptr;
  nb::object result = output<float>(out, shape_of(x), &dst, {bytes_of(x, "x")}, "out", true);
  KernelScope release(x.size());
  mf::fake_quantize(f, in, dst, x.size(), opt);
  return result;
}

// Codes one per element (1, 2 or 4 bytes), or for formats of <= 4 bits with
// `packed` two per byte along the last axis (element 2j in the low nibble).
template <class T>
nb::object encode_as(const In& x, const mf::Format& f, const mf::RoundOptions& opt, std::optional<Out>& out) {
  T* dst = nullptr;
  nb::object result = output<T>(out, shape_of(x), &dst, {bytes_of(x, "x")});
  KernelScope release(x.size());
  mf::quantize(f, static_cast<const float*>(x.data()), dst, x.size(), opt);
  return result;
}

nb::object encode(const In& x, const std::string& spec, const std::string& round, bool saturate, bool flush,
                  uint64_t seed, int random_bits, bool packed, std::optional<Out> out) {
  f32_input(x);
  const FormatPtr fp = format_of(spec);
  const mf::Format& f = *fp;
  const mf::RoundOptions opt = round_options(round, saturate, flush, seed, random_bits);
  if (!packed) {
    switch (f.storage_bytes()) {
      case 1: return encode_as<uint8_t>(x, f, opt, out);
      case 2: return encode_as<uint16_t>(x, f, opt, out);
      default: return encode_as<uint32_t>(x, f, opt, out);
    }
  }
  if (f.total_bits() > 4)
    throw nb::value_error(("packed: only formats of 4 bits or fewer pack two codes per byte, " + f.name + " has " +
                           std::to_string(f.total_bits()))
                              .c_str());
  if (x.ndim() == 0) throw nb::value_error("packed: x needs at least one dimension");
  std::vector<size_t> shape = shape_of(x);
  const size_t k = shape.back(), rows = k ? x.size() / k : 0, kp = (k + 1) / 2;
  shape.back() = kp;
  uint8_t* dst = nullptr;
  nb::object result = output<uint8_t>(out, shape, &dst, {bytes_of(x, "x")});
  KernelScope release(x.size());
  std::vector<uint8_t> codes(x.size());
  mf::quantize(f, static_cast<const float*>(x.data()), codes.data(), x.size(), opt);
#pragma omp parallel for schedule(static) if (x.size() >= mf::kParallelThreshold)
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* c = codes.data() + r * k;
    for (size_t j = 0; j < kp; ++j) {
      const uint8_t hi = 2 * j + 1 < k ? c[2 * j + 1] : 0;
      dst[r * kp + j] = static_cast<uint8_t>((c[2 * j] & 0xF) | (hi << 4));
    }
  }
  return result;
}


nb::object decode(const In& codes, const std::string& spec, bool packed, std::optional<size_t> count,
                  std::optional<Out> out) {
  check_layout(codes, "codes");
  const FormatPtr fp = format_of(spec);
  const mf::Format& f = *fp;
  std::vector<size_t> shape = shape_of(codes);
  float* dst = nullptr;
  if (!packed) {
    check_codes(codes, "codes", f.storage_bytes());
    if (count) throw nb::value_error("count: only for packed codes");
    if (f.storage_bytes() == 1) check_array_codes(codes, f, false);
    nb::object result = output<float>(out, shape, &dst, {bytes_of(codes, "codes")});
    KernelScope release(codes.size());
    mf::dequantize(f, codes.data(), dst, codes.size());
    return result;
  }
  if (f.total_bits() > 4) throw nb::value_error(("packed: " + f.name + " codes do not pack two per byte").c_str());
  check_codes(codes, "codes", 1);
  check_array_codes(codes, f, true);
  if (codes.ndim() == 0) throw nb::value_error("packed: codes need at least one dimension");
  const size_t kp = shape.back(), rows = kp ? codes.size() / kp : 0;
  const size_t k = count ? *count : 2 * kp;
  if (k / 2 + k % 2 != kp)  // ceil(k / 2) without overflow: k <= 2 kp, rows x k <= 2 x the codes' bytes
    throw nb::value_error(("count: " + std::to_string(k) + " values do not pack into " + std::to_string(kp) +
                           " bytes per row")
                              .c_str());
  shape.back() = k;
  nb::object result = output<float>(out, shape, &dst, {bytes_of(codes, "codes")});
  KernelScope release(rows * k);
  float table[16];
  for (uint32_t c = 0; c < 16; ++c) table[c] = c < f.code_count() ? mf::decode_f32(f, c) : NAN;
  const auto* src = static_cast<const uint8_t*>(codes.data());
#pragma omp parallel for schedule(static) if (rows * k >= mf::kParallelThreshold)
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < k; ++j) dst[r * k + j] = table[(src[r * kp + j / 2] >> (4 * (j & 1))) & 0xF];
  return result;
}

mf::MxConfig mx_config(const std::string& name, int block, const std::string& scale_rounding) {
  mf::MxConfig cfg;
  try {
    cfg = mf::mx_preset(name.c_str());
  } catch (const std::invalid_argument& e) {
    throw nb::value_error((std::string("format: ") + e.what()).c_str());
  }
  if (block < 1) throw nb::value_error(("block must be >= 1, got " + std::to_string(block)).c_str());
  cfg.block = block;
  if (scale_rounding == "floor") cfg.scale_rounding = mf::ScaleRounding::floor;
  else if (scale_rounding == "ceil") cfg.scale_rounding = mf::ScaleRounding::ceil;
  else throw nb::value_error(("scale_rounding: expected floor or ceil, got '" + scale_rounding + "'").c_str());
  return cfg;
}

// Blocks run along the last axis of length K, ceil(K / block) per row.
// codes_out / scales_out: the caller's arrays (both or neither); the pair is then (None, None).
std::pair<nb::object, nb::object> mx_quantize(const In& x, const std::string& name, int block,
                                              const std::string& scale_rounding, std::optional<Out> codes_out,
                                              std::optional<Out> scales_out) {
  const float* in = f32_input(x);
  const mf::MxConfig cfg = mx_config(name, block, scale_rounding);
  if (x.ndim() == 0) throw nb::value_error("x needs at least one dimension");
  std::vector<size_t> shape = shape_of(x);
  const size_t k = shape.back(), rows = k ? x.size() / k : 0, b = static_cast<size_t>(block), nb_ = k / b + (k % b != 0);
  if (codes_out.has_value() != scales_out.has_value())
    throw nb::value_error("out: give both the codes and the scales array, or neither");
  uint8_t *c = nullptr, *s = nullptr;
  nb::object codes = output<uint8_t>(codes_out, shape, &c, {bytes_of(x, "x")}, "out[0] (codes)");
  shape.back() = nb_;
  nb::object scales = output<uint8_t>(scales_out, shape, &s, {bytes_of(x, "x")}, "out[1] (scales)");
  if (codes_out) check_apart({}, {bytes_of(*codes_out, "out[0] (codes)"), bytes_of(*scales_out, "out[1] (scales)")});
  {
    KernelScope release(x.size());
    if (k % b == 0) {  // whole rows of blocks: one (threaded) call
      mf::mx_quantize_into(cfg, in, x.size(), {c, x.size()}, {s, rows * nb_});
    } else {
#pragma omp parallel for schedule(static) if (x.size() >= mf::kParallelThreshold)
      for (size_t r = 0; r < rows; ++r) mf::mx_quantize_into(cfg, in + r * k, k, {c + r * k, k}, {s + r * nb_, nb_});
    }
  }
  return {codes, scales};
}

nb::object mx_dequantize(const In& codes, const In& scales, const std::string& name, int block,
                         std::optional<Out> out) {
  const mf::MxConfig cfg = mx_config(name, block, "floor");
  check_layout(codes, "codes");
  check_layout(scales, "scales");
  check_codes(codes, "codes", 1);
  check_codes(scales, "scales", 1);
  check_array_codes(codes, cfg.element, false);
  if (codes.ndim() == 0) throw nb::value_error("codes need at least one dimension");
  const std::vector<size_t> shape = shape_of(codes);
  const size_t k = shape.back(), rows = k ? codes.size() / k : 0, b = static_cast<size_t>(block), nb_ = k / b + (k % b != 0);
  std::vector<size_t> want = shape;
  want.back() = nb_;
  if (shape_of(scales) != want) throw nb::value_error("scales: shape must be codes' with the last axis ceil(K / block)");
  float* dst = nullptr;
  nb::object result = output<float>(out, shape, &dst, {bytes_of(codes, "codes"), bytes_of(scales, "scales")});
  KernelScope release(codes.size());
  // value = decode(code) x 2^(scale - 127) (MXINT8: code / 64), one rounding
  // from the exact double product; scale 0xFF is NaN.
  const bool is_int = cfg.element.kind == mf::Kind::integer;
  double table[256];
  for (uint32_t c = 0; c < 256; ++c) table[c] = c < cfg.element.code_count() ? mf::decode(cfg.element, c) : NAN;
  const auto* cs = static_cast<const uint8_t*>(codes.data());
  const auto* ss = static_cast<const uint8_t*>(scales.data());
#pragma omp parallel for schedule(static) if (codes.size() >= mf::kParallelThreshold)
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < k; ++j) {
      const uint8_t sc = ss[r * nb_ + j / b];
      const int e = static_cast<int>(sc) - 127 - (is_int ? 6 : 0);
      dst[r * k + j] = sc == 0xFF ? NAN : static_cast<float>(std::ldexp(table[cs[r * k + j]], e));
    }
  return result;
}

nb::dict format_dict(const mf::Format& f) {
  const bool sub = f.kind == mf::Kind::floating && f.subnormals && f.mantissa_bits > 0;
  nb::dict d;
  d["name"] = f.name;
  d["kind"] = f.kind == mf::Kind::floating ? "float" : f.kind == mf::Kind::integer ? "integer" : "exponent";
  d["exponent_bits"] = f.exponent_bits;
  d["mantissa_bits"] = f.mantissa_bits;
  d["total_bits"] = f.total_bits();
  d["storage_bytes"] = f.storage_bytes();
  d["bias"] = f.bias;
  d["max_exponent"] = f.max_exponent();
  d["min_exponent"] = f.min_exponent();
  d["max"] = f.max();
  d["min_normal"] = f.min_normal();
  d["min_subnormal"] = sub ? nb::cast(f.min_subnormal()) : nb::none();
  d["epsilon"] = f.epsilon();
  d["has_inf"] = f.has_inf;
  d["nan"] = f.nan_name();
  d["negative_zero"] = f.negative_zero;
  d["subnormals"] = sub;
  d["signed"] = f.is_signed;
  return d;
}

}  // namespace

void bind_formats(nb::module_& m) {
  using namespace nb::literals;
  m.def("quantize_dlpack", &quantize, "x"_a, "format"_a, "round"_a = "nearest-even", "saturate"_a = false,
        "flush_subnormals"_a = false, "seed"_a = 0, "random_bits"_a = 16, "out"_a = nb::none(),
        "fp32 -> fp32 values rounded into `format` (None when written into `out`).");
  m.def("encode_dlpack", &encode, "x"_a, "format"_a, "round"_a = "nearest-even", "saturate"_a = false,
        "flush_subnormals"_a = false, "seed"_a = 0, "random_bits"_a = 16, "packed"_a = false, "out"_a = nb::none(),
        "fp32 -> codes (uint8/16/32 by the format's storage bytes; packed: two 4-bit codes per byte).");
  m.def("decode_dlpack", &decode, "codes"_a, "format"_a, "packed"_a = false, "count"_a = nb::none(), "out"_a = nb::none(),
        "codes -> their exact fp32 values.");
  m.def("mx_quantize", &mx_quantize, "x"_a, "format"_a, "block"_a = 32, "scale_rounding"_a = "floor",
        "codes_out"_a = nb::none(), "scales_out"_a = nb::none(),
        "fp32 -> (element codes, E8M0 scale codes), blocks along the last axis; written into codes_out and "
        "scales_out (uint8, C-contiguous) when given.");
  m.def("mx_dequantize", &mx_dequantize, "codes"_a, "scales"_a, "format"_a, "block"_a = 32, "out"_a = nb::none(),
        "MX element codes and E8M0 scales -> fp32 values.");
  m.def("formats", [] {
    nb::list l;
    for (const auto& f : mf::presets()) l.append(format_dict(f));
    return l;
  }, "Every preset format with its exact properties (as `mantissa formats --json`).");
  m.def("format_info", [](const std::string& spec) { return format_dict(*format_of(spec)); }, "format"_a,
        "One preset or user-defined eXmY[:option=value...] format's properties.");
  m.def("encode_scalar", [](double x, const std::string& spec, const std::string& round, bool saturate, nb::handle seed,
                            nb::handle index) {
    return mf::encode(*format_of(spec), x, round_options(round, saturate, false, u64_arg(seed, "seed"), 16),
                      u64_arg(index, "index"));
  }, "x"_a, "format"_a, "round"_a = "nearest-even", "saturate"_a = false, "seed"_a = 0, "index"_a = 0,
        "The scalar reference encoder on one fp64 value (as `mantissa quantize`).");
  m.def("stochastic_bits", [](nb::handle seed_arg, size_t n, int bits) {
    if (bits < 1 || bits > 32) throw nb::value_error(("bits must be 1..32, got " + std::to_string(bits)).c_str());
    const uint64_t seed = u64_arg(seed_arg, "seed");
    auto a = new_array<uint32_t>({n});
    for (size_t i = 0; i < n; ++i) a.data()[i] = mf::stochastic_bits(seed, i, bits);
    return a;
  }, "seed"_a, "n"_a, "bits"_a = 16, "The random draws stochastic rounding compares for elements 0..n-1.");
  m.def("format_cache_size", &format_cache_size, "Formats the spec cache holds now (at most 256).");
  m.def("active_isa", [] { return std::string(mantissa::cpu::isa_name(mantissa::cpu::active_isa())); });
  m.def("last_kernel", &mf::last_kernel, "The kernel the last conversion on this thread ran.");
}

}  // namespace mantissa::py
