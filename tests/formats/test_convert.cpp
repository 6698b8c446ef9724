// Bulk conversion (convert.hpp) against the scalar reference (round.hpp), bit
// for bit: every preset, every rounding mode, saturating or not, flushing or
// not, at every instruction-set level this CPU has, on random and edge inputs
// (NaN payloads, fp32 subnormals, every format's midpoints and their fp32
// neighbours), through both the one-thread and the OpenMP path.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "formats/convert_mx.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/mx.hpp"

namespace mf = mantissa::formats;

namespace {

// Restores the ISA cap a test changed.
struct IsaGuard {
  ~IsaGuard() { mantissa::cpu::set_max_isa(mantissa::cpu::Isa::avx512_bf16_fp16); }
};

std::vector<mantissa::cpu::Isa> levels() {
  std::vector<mantissa::cpu::Isa> v;
  for (mantissa::cpu::Isa isa : mantissa::cpu::kAllIsas)
    if (isa <= mantissa::cpu::detected_isa()) v.push_back(isa);
  return v;
}

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

// Inputs every format must survive: specials, fp32 subnormals, powers of two
// across the whole fp32 range, and for formats of <= 16 bits every finite
// value, the midpoints between neighbours and the fp32 values one ulp either
// side of each midpoint.
std::vector<float> edge_inputs(const mf::Format& f) {
  std::vector<float> v;
  for (uint32_t b : {0u, 1u, 2u, 0x7FFFFFu, 0x400000u, 0x800000u, 0x7F7FFFFFu, 0x7F800000u, 0x7FC00000u, 0x7F800001u,
                     0x7FBFFFFFu, 0x7FFFFFFFu, 0x7FE00000u, 0x3F800000u})
    for (uint32_t s : {0u, 0x80000000u}) v.push_back(from_bits(b | s));
  for (int e = -149; e <= 127; ++e)
    for (float m : {1.0f, 1.5f, 1.25f, 1.75f, 1.0625f})
      for (float s : {1.0f, -1.0f}) v.push_back(s * std::ldexp(m, e));
  if (f.total_bits() <= 16 && f.kind == mf::Kind::floating) {
    std::vector<double> vals;
    for (uint32_t c = 0; c < f.code_count(); ++c) {
      const double d = mf::decode(f, c);
      if (std::isfinite(d) && d >= 0) vals.push_back(d);
    }
    std::sort(vals.begin(), vals.end());
    vals.push_back(2 * vals.back() - vals[vals.size() - 2]);  // the first value past max
    for (size_t i = 0; i + 1 < vals.size(); ++i) {
      const float mid = static_cast<float>((vals[i] + vals[i + 1]) / 2);  // exact for <= 16-bit formats
      for (float x : {static_cast<float>(vals[i]), mid, std::nextafter(mid, 0.0f),
                      std::nextafter(mid, std::numeric_limits<float>::infinity())}) {
        v.push_back(x);
        v.push_back(-x);
      }
    }
  }
  return v;
}

// Random inputs: raw bit patterns (every exponent, NaN payloads) and values
// whose exponent lies in the format's interesting range.
std::vector<float> random_inputs(const mf::Format& f, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  const int lo = std::max(-149, f.kind == mf::Kind::floating ? f.min_exponent() - f.mantissa_bits - 3 : -10);
  const int hi = std::min(127, f.max_exponent() + 2);
  std::uniform_int_distribution<int> exp_dist(lo, hi);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = rng();
    if (i % 4 == 0) {
      v[i] = from_bits(bits);
    } else {
      const float m = 1.0f + static_cast<float>(bits & 0x7FFFFF) * 0x1p-23f;
      v[i] = ((bits >> 31) ? -1.0f : 1.0f) * std::ldexp(m, exp_dist(rng));
    }
  }
  return v;
}

std::vector<uint32_t> read_codes(const std::vector<uint8_t>& buf, int bytes, size_t n) {
  std::vector<uint32_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t c = 0;
    std::memcpy(&c, buf.data() + i * static_cast<size_t>(bytes), static_cast<size_t>(bytes));
    out[i] = c;
  }
  return out;
}

std::string describe(const mf::Format& f, const mf::RoundOptions& o, mantissa::cpu::Isa isa) {
  return f.name + " " + mf::round_name(o.mode) + (o.saturate ? " sat" : "") + (o.flush_subnormals ? " flush" : "") +
         (o.mode == mf::Round::stochastic ? " bits=" + std::to_string(o.random_bits) : "") + " isa=" +
         mantissa::cpu::isa_name(isa) + " kernel=" + mf::last_kernel();
}

// Quantises `in` at every ISA level and compares codes and fake-quantised
// values with the scalar encoder applied element by element.
// The scalar level runs the reference loop itself (plumbing and threading
// only), so callers may leave it out to save time.
void check_against_reference(const mf::Format& f, const std::vector<float>& in, const mf::RoundOptions& o,
                             bool include_scalar_level = true) {
  IsaGuard guard;
  const size_t n = in.size();
  const int bytes = f.storage_bytes();
  std::vector<uint32_t> want(n);
  std::vector<uint32_t> want_fake(n);
  for (size_t i = 0; i < n; ++i) {
    want[i] = mf::encode(f, in[i], o, i);
    want_fake[i] = std::bit_cast<uint32_t>(mf::decode_f32(f, want[i]));
  }
  std::vector<uint8_t> buf(n * static_cast<size_t>(bytes));
  std::vector<float> fake(n);
  for (mantissa::cpu::Isa isa : levels()) {
    if (isa == mantissa::cpu::Isa::scalar && !include_scalar_level) continue;
    mantissa::cpu::set_max_isa(isa);
    mf::quantize(f, in.data(), buf.data(), n, o);
    const std::string what = describe(f, o, isa);
    const std::vector<uint32_t> got = read_codes(buf, bytes, n);
    size_t bad = 0;
    for (size_t i = 0; i < n && bad < 5; ++i)
      if (got[i] != want[i]) {
        ++bad;
        ADD_FAILURE() << what << ": input " << std::hexfloat << in[i] << " (bits 0x" << std::hex
                      << std::bit_cast<uint32_t>(in[i]) << ") index " << std::dec << i << ": got 0x" << std::hex
                      << got[i] << " want 0x" << want[i];
      }
    mf::fake_quantize(f, in.data(), fake.data(), n, o);
    for (size_t i = 0; i < n && bad < 5; ++i)
      if (std::bit_cast<uint32_t>(fake[i]) != want_fake[i]) {
        ++bad;
        ADD_FAILURE() << what << " fake_quantize: input " << std::hexfloat << in[i] << " index " << std::dec << i
                      << ": got bits 0x" << std::hex << std::bit_cast<uint32_t>(fake[i]) << " want 0x"
                      << want_fake[i];
      }
    if (bad) return;
  }
}

std::vector<mf::RoundOptions> option_sets() {
  std::vector<mf::RoundOptions> v;
  for (mf::Round mode : {mf::Round::nearest_even, mf::Round::nearest_away, mf::Round::toward_zero, mf::Round::up,
                         mf::Round::down})
    for (bool sat : {false, true}) v.push_back({.mode = mode, .saturate = sat});
  v.push_back({.mode = mf::Round::nearest_even, .flush_subnormals = true});
  v.push_back({.mode = mf::Round::down, .saturate = true, .flush_subnormals = true});
  for (int bits : {16, 3, 32}) v.push_back({.mode = mf::Round::stochastic, .random_bits = bits, .seed = 42});
  v.push_back({.mode = mf::Round::stochastic, .saturate = true, .flush_subnormals = true, .random_bits = 8,
               .seed = 0x123456789abcdefULL});
  return v;
}

}  // namespace

// Every preset x every option set; 2^14 random inputs plus the edge set
// (every midpoint of the <= 16-bit formats): about 10 million comparisons.
TEST(Convert, EveryPresetEveryModeMatchesScalarReference) {
  for (const mf::Format& f : mf::presets()) {
    std::vector<float> in = random_inputs(f, size_t{1} << 14, 7);
    const std::vector<float> edges = edge_inputs(f);
    in.insert(in.end(), edges.begin(), edges.end());
    for (const mf::RoundOptions& o : option_sets())
      check_against_reference(f, in, o, o.mode == mf::Round::nearest_even || o.mode == mf::Round::stochastic);
  }
}

// The four formats the issue names, half a million more random inputs each
// (the exhaustive test covers all 2^32 inputs on demand).
TEST(Convert, HeadlineFormatsHalfMillionInputs) {
  for (const char* name : {"bf16", "fp16", "e4m3fn", "e5m2"}) {
    const mf::Format& f = mf::preset(name);
    const std::vector<float> in = random_inputs(f, size_t{1} << 19, 99);
    check_against_reference(f, in, {}, false);
    check_against_reference(f, in, {.saturate = true}, false);
  }
}

// Above kParallelThreshold the array is split across threads; the codes,
// stochastic ones included, must not depend on the split.
TEST(Convert, ThreadedMatchesScalarReference) {
  for (const char* name : {"e4m3fn", "bf16", "e2m1fn"}) {
    const mf::Format& f = mf::preset(name);
    const std::vector<float> in = random_inputs(f, 3 * mf::kParallelThreshold + 5, 13);
    check_against_reference(f, in, {.mode = mf::Round::stochastic, .random_bits = 12, .seed = 77});
    check_against_reference(f, in, {.mode = mf::Round::nearest_even}, false);
  }
}

TEST(Convert, UserDefinedFormats) {
  for (const char* spec : {"e3m3", "e5m6:bias=10", "e6m9", "e4m3:inf=0:nan=fn", "e2m5:nan=none:inf=0"}) {
    const mf::Format f = mf::parse_format(spec);
    std::vector<float> in = random_inputs(f, 20000, 3);
    const std::vector<float> edges = edge_inputs(f);
    in.insert(in.end(), edges.begin(), edges.end());
    for (const mf::RoundOptions& o : {mf::RoundOptions{}, mf::RoundOptions{.mode = mf::Round::up, .saturate = true},
                                      mf::RoundOptions{.mode = mf::Round::stochastic, .seed = 5}})
      check_against_reference(f, in, o);
  }
}

// Every length 0..70 at an unaligned start: the masked tails of the vector
// kernels must neither drop nor overwrite elements.
TEST(Convert, TailsAndOffsets) {
  IsaGuard guard;
  const mf::Format& f = mf::preset("e4m3fn");
  const std::vector<float> in = random_inputs(f, 80, 11);
  for (mantissa::cpu::Isa isa : levels()) {
    mantissa::cpu::set_max_isa(isa);
    for (size_t n = 0; n <= 70; ++n) {
      std::vector<uint8_t> buf(n + 8, 0xAB);
      mf::quantize(f, in.data() + 3, buf.data() + 1, n, {.mode = mf::Round::stochastic, .seed = 9});
      EXPECT_EQ(buf[0], 0xAB);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(buf[1 + i], mf::encode(f, in[3 + i], {.mode = mf::Round::stochastic, .seed = 9}, i))
            << "n=" << n << " i=" << i << " isa=" << mantissa::cpu::isa_name(isa);
      for (size_t i = n + 1; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0xAB) << "n=" << n << " wrote past the end";
    }
  }
}

// Every code of every format of <= 16 bits decodes exactly as the scalar
// decoder does (NaN bit patterns included).
TEST(Convert, DequantizeEveryCode) {
  IsaGuard guard;
  for (const mf::Format& f : mf::presets()) {
    if (f.total_bits() > 16) continue;
    const size_t n = f.code_count();
    std::vector<uint8_t> codes(n * static_cast<size_t>(f.storage_bytes()));
    for (size_t c = 0; c < n; ++c) std::memcpy(codes.data() + c * f.storage_bytes(), &c, f.storage_bytes());
    std::vector<float> out(n);
    for (mantissa::cpu::Isa isa : levels()) {
      mantissa::cpu::set_max_isa(isa);
      mf::dequantize(f, codes.data(), out.data(), n);
      for (size_t c = 0; c < n; ++c)
        ASSERT_EQ(std::bit_cast<uint32_t>(out[c]), std::bit_cast<uint32_t>(mf::decode_f32(f, static_cast<uint32_t>(c))))
            << f.name << " code 0x" << std::hex << c << " isa=" << mantissa::cpu::isa_name(isa) << " " << mf::last_kernel();
    }
  }
}

TEST(Convert, FakeQuantizeInPlace) {
  const mf::Format& f = mf::preset("e5m2");
  std::vector<float> v = random_inputs(f, 100000, 5);
  const std::vector<float> orig = v;
  mf::fake_quantize(f, v.data(), v.data(), v.size(), {.mode = mf::Round::nearest_away});
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(v[i]),
              std::bit_cast<uint32_t>(mf::decode_f32(f, mf::encode(f, orig[i], {.mode = mf::Round::nearest_away}))))
        << i;
}

// The best kernel is the one that runs, and the cap demotes it.
TEST(Convert, KernelSelectionFollowsIsaCap) {
  IsaGuard guard;
  std::vector<float> in(64, 1.5f);
  std::vector<uint16_t> out(64);
  const mf::Format& bf16 = mf::preset("bf16");
  mantissa::cpu::set_max_isa(mantissa::cpu::Isa::scalar);
  mf::quantize(bf16, in.data(), out.data(), in.size());
  EXPECT_EQ(mf::last_kernel(), "scalar:bf16:nearest-even");
  if (mantissa::cpu::detected_isa() >= mantissa::cpu::Isa::avx2) {
    mantissa::cpu::set_max_isa(mantissa::cpu::Isa::avx2);
    mf::quantize(bf16, in.data(), out.data(), in.size());
    EXPECT_EQ(mf::last_kernel(), "avx2:generic:bf16:nearest-even");
    std::vector<uint16_t> half(in.size());
    mf::quantize(mf::preset("fp16"), in.data(), half.data(), in.size());
    EXPECT_EQ(mf::last_kernel(), "avx2:cvtps2ph:fp16:nearest-even");
    std::vector<uint8_t> byte(in.size());
    mf::quantize(mf::preset("e4m3fn"), in.data(), byte.data(), in.size(), {.saturate = true});
    EXPECT_EQ(mf::last_kernel(), "avx2:via_fp16:e4m3fn:nearest-even");
    mf::quantize(mf::preset("e4m3fn"), in.data(), byte.data(), in.size(), {.mode = mf::Round::stochastic});
    EXPECT_EQ(mf::last_kernel(), "avx2:generic:e4m3fn:stochastic");
    std::vector<float> back(in.size());
    mf::dequantize(mf::preset("e4m3fn"), byte.data(), back.data(), in.size());
    EXPECT_EQ(mf::last_kernel(), "avx2:decode:e4m3fn");
    mf::fake_quantize(mf::preset("fp16"), in.data(), back.data(), in.size());
    EXPECT_EQ(mf::last_kernel(), "avx2:cvtps2ph+cvtph2ps:fp16:nearest-even");
  }
  if (mantissa::cpu::detected_isa() >= mantissa::cpu::Isa::avx512) {
    mantissa::cpu::set_max_isa(mantissa::cpu::Isa::avx512);
    mf::quantize(bf16, in.data(), out.data(), in.size());
    EXPECT_EQ(mf::last_kernel(), "avx512:generic:bf16:nearest-even");
    std::vector<uint16_t> half(in.size());
    mf::quantize(mf::preset("fp16"), in.data(), half.data(), in.size());
    EXPECT_EQ(mf::last_kernel(), "avx512:cvtps2ph:fp16:nearest-even");
  }
  if (mantissa::cpu::detected_isa() >= mantissa::cpu::Isa::avx512_bf16) {
    mantissa::cpu::set_max_isa(mantissa::cpu::Isa::avx512_bf16);
    mf::quantize(bf16, in.data(), out.data(), in.size());
    EXPECT_EQ(mf::last_kernel(), "avx512_bf16:cvtneps2bf16:bf16:nearest-even");
    mf::quantize(bf16, in.data(), out.data(), in.size(), {.mode = mf::Round::up});
    EXPECT_EQ(mf::last_kernel(), "avx512:generic:bf16:up");
  }
  EXPECT_EQ(out[0], 0x3FC0);  // 1.5 in bf16, whichever kernel ran
}

// The bf16 converter needs AVX512-BF16 only, whatever AVX512-FP16 says.
TEST(Convert, DetectionRanksEachExtensionOnItsOwn) {
  __builtin_cpu_init();
  const bool base = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool bf16 = base && __builtin_cpu_supports("avx512bf16");
  const bool fp16 = __builtin_cpu_supports("avx512fp16");
  const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const mantissa::cpu::Isa want = !base          ? (avx2 ? mantissa::cpu::Isa::avx2 : mantissa::cpu::Isa::scalar)
                       : !bf16        ? mantissa::cpu::Isa::avx512
                       : fp16         ? mantissa::cpu::Isa::avx512_bf16_fp16
                                      : mantissa::cpu::Isa::avx512_bf16;
  EXPECT_EQ(mantissa::cpu::detected_isa(), want) << mantissa::cpu::isa_name(mantissa::cpu::detected_isa());
  EXPECT_STREQ(mantissa::cpu::isa_name(mantissa::cpu::Isa::avx512_bf16), "avx512_bf16");
}

// The vector MX block quantiser against the scalar mx_quantize: blocks of
// every magnitude (fp32 subnormal to near overflow), zero blocks, blocks
// with NaN or inf, a short last block, both scale rules, and rounding modes.
TEST(Convert, MxFastMatchesScalarMx) {
  IsaGuard guard;
  if (mantissa::cpu::detected_isa() < mantissa::cpu::Isa::avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  const size_t n = mf::kParallelThreshold + 21;
  std::mt19937 rng(17);
  std::vector<float> in(n);
  for (size_t b = 0; b * 32 < n; ++b) {
    const int e = static_cast<int>(rng() % 290) - 160;  // block magnitude 2^-160 .. 2^129
    for (size_t i = b * 32; i < std::min(n, b * 32 + 32); ++i) {
      const uint32_t r = rng();
      const float m = 1.0f + static_cast<float>(r & 0x7FFFFF) * 0x1p-23f;
      in[i] = ((r >> 31) ? -1.0f : 1.0f) * std::ldexp(m, e - static_cast<int>(rng() % 24));
    }
  }
  for (size_t i = 64; i < 96; ++i) in[i] = 0.0f;
  in[70] = -0.0f;
  in[130] = std::numeric_limits<float>::quiet_NaN();
  in[200] = -std::numeric_limits<float>::infinity();
  in[300] = 0x1p-149f;
  // The best kernel this CPU has, then the AVX2 one.
  const std::pair<mantissa::cpu::Isa, const char*> kCases[] = {
      {mantissa::cpu::Isa::avx512_bf16_fp16, "mxfp8_e4m3"}, {mantissa::cpu::Isa::avx512_bf16_fp16, "mxfp8_e5m2"},
      {mantissa::cpu::Isa::avx512_bf16_fp16, "mxfp6_e2m3"}, {mantissa::cpu::Isa::avx512_bf16_fp16, "mxfp6_e3m2"},
      {mantissa::cpu::Isa::avx512_bf16_fp16, "mxfp4"},      {mantissa::cpu::Isa::avx2, "mxfp8_e4m3"},
      {mantissa::cpu::Isa::avx2, "mxfp8_e5m2"},             {mantissa::cpu::Isa::avx2, "mxfp6_e2m3"},
      {mantissa::cpu::Isa::avx2, "mxfp6_e3m2"},             {mantissa::cpu::Isa::avx2, "mxfp4"}};
  for (const auto& [cap, name] : kCases) {
    mantissa::cpu::set_max_isa(cap);
    for (mf::ScaleRounding sr : {mf::ScaleRounding::floor, mf::ScaleRounding::ceil}) {
      for (mf::RoundOptions ro : {mf::RoundOptions{.saturate = true}, mf::RoundOptions{.mode = mf::Round::up},
                                  mf::RoundOptions{.mode = mf::Round::stochastic, .saturate = true, .seed = 3}}) {
        mf::MxConfig cfg = mf::mx_preset(name);
        cfg.scale_rounding = sr;
        cfg.round = ro;
        const mf::MxArray want = mf::mx_quantize(cfg, in.data(), n);
        std::vector<uint8_t> codes(want.codes.size(), 0xAB), scales(want.scales.size(), 0xAB);
        ASSERT_TRUE(mf::detail::mx_quantize_fast(cfg, in.data(), n, codes.data(), scales.data()));
        const std::string what = std::string(name) + (sr == mf::ScaleRounding::ceil ? " ceil " : " floor ") +
                                 mf::round_name(ro.mode) + " " + mantissa::cpu::isa_name(cap);
        for (size_t b = 0; b < scales.size(); ++b) ASSERT_EQ(scales[b], want.scales[b]) << what << " block " << b;
        for (size_t i = 0; i < codes.size(); ++i)
          ASSERT_EQ(codes[i], want.codes[i]) << what << " element " << i << " input " << std::hexfloat << in[i];
      }
    }
  }
  mantissa::cpu::set_max_isa(mantissa::cpu::Isa::scalar);
  std::vector<uint8_t> codes(n), scales(n / 32 + 1);
  EXPECT_FALSE(mf::detail::mx_quantize_fast(mf::mx_preset("mxfp8_e4m3"), in.data(), n, codes.data(), scales.data()));
}
