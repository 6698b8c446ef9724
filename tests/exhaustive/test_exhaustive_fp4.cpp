// Exhaustive: every finite fp32 bit pattern through the E2M1 element rounding
// of the FP4 block casts, vector path against the scalar reference
// (formats/fp4.hpp), nearest-even and stochastic, NVFP4's division by the
// block's t x s and MXFP4's multiplication by 2^-e with factors cycling over
// many block scales; and every finite pattern through the whole NVFP4 block
// cast (16 consecutive patterns a block); each under every vector tier the
// host has (AVX2, AVX-512). Runs on demand (ctest -L exhaustive).
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "formats/fp4_cases.hpp"
#include "mantissa/formats/fp4.hpp"

namespace mf = mantissa::formats;
namespace cpu = mantissa::cpu;
using fp4_cases::Cap;

namespace {

// The vector tiers' paths, once each: avx2, and the host's own from AVX-512 up.
std::vector<cpu::Isa> tiers() {
  std::vector<cpu::Isa> out;
  if (cpu::detected_isa() >= cpu::Isa::avx2) out.push_back(cpu::Isa::avx2);
  if (cpu::detected_isa() >= cpu::Isa::avx512) out.push_back(cpu::detected_isa());
  return out;
}

constexpr uint64_t kChunk = uint64_t{1} << 16;
constexpr uint64_t kAll = uint64_t{1} << 32;

// Finite patterns of [first, first + kChunk) compacted into `in`.
size_t finite_chunk(uint64_t first, std::vector<float>& in) {
  size_t n = 0;
  for (uint64_t i = 0; i < kChunk; ++i) {
    const float v = std::bit_cast<float>(static_cast<uint32_t>(first + i));
    if (std::isfinite(v)) in[n++] = v;
  }
  return n;
}

void elements(mf::Fp4Scale scale, mf::Fp4Rounding rounding) {
  std::atomic<uint64_t> bad{0};
#pragma omp parallel
  {
    std::vector<float> in(kChunk), factor(kChunk);
    std::vector<uint8_t> a(kChunk), b(kChunk);
#pragma omp for schedule(dynamic, 16)
    for (int64_t c = 0; c < static_cast<int64_t>(kAll / kChunk); ++c) {
      const uint64_t first = static_cast<uint64_t>(c) * kChunk;
      const size_t n = finite_chunk(first, in);
      // NVFP4 divisors t x s over many binades; MXFP4 multipliers 2^-127 .. 2^127.
      for (size_t i = 0; i < n; ++i)
        factor[i] = scale == mf::Fp4Scale::nvfp4 ? std::ldexp(1.0f + static_cast<float>(i % 8) / 8.0f, static_cast<int>(i % 200) - 100)
                                                 : std::ldexp(1.0f, static_cast<int>(i % 255) - 127);
      mf::fp4_round_elements(scale, in.data(), factor.data(), static_cast<int64_t>(n), rounding, 17, first, a.data());
      mf::fp4_round_elements_reference(scale, in.data(), factor.data(), static_cast<int64_t>(n), rounding, 17, first,
                                       b.data());
      for (size_t i = 0; i < n; ++i)
        if (a[i] != b[i] && bad.fetch_add(1) < 10) {
#pragma omp critical
          std::printf("MISMATCH x %a factor %a: vector 0x%x reference 0x%x\n", in[i], factor[i], a[i], b[i]);
        }
    }
  }
  EXPECT_EQ(bad.load(), 0u);
}

}  // namespace

TEST(ExhaustiveFp4, NvElementsNearestEven) {
  if (!mf::fp4_vector_available()) GTEST_SKIP() << "no AVX2";
  for (cpu::Isa isa : tiers()) {
    const Cap cap(isa);
    SCOPED_TRACE(cpu::isa_name(isa));
    elements(mf::Fp4Scale::nvfp4, mf::Fp4Rounding::nearest_even);
  }
}

TEST(ExhaustiveFp4, MxElementsStochastic) {
  if (!mf::fp4_vector_available()) GTEST_SKIP() << "no AVX2";
  for (cpu::Isa isa : tiers()) {
    const Cap cap(isa);
    SCOPED_TRACE(cpu::isa_name(isa));
    elements(mf::Fp4Scale::mxfp4, mf::Fp4Rounding::stochastic);
  }
}

TEST(ExhaustiveFp4, NvBlockCastStochastic) {
  if (!mf::fp4_vector_available()) GTEST_SKIP() << "no AVX2";
  for (cpu::Isa isa : tiers()) {
    const Cap cap(isa);
    SCOPED_TRACE(cpu::isa_name(isa));
    std::atomic<uint64_t> bad{0};
  #pragma omp parallel
    {
      std::vector<float> in(kChunk);
      std::vector<uint8_t> ca(kChunk), cb(kChunk), sa(kChunk / 16 + 1), sb(kChunk / 16 + 1);
      std::vector<uint16_t> da(kChunk), db(kChunk);
  #pragma omp for schedule(dynamic, 16)
      for (int64_t c = 0; c < static_cast<int64_t>(kAll / kChunk); ++c) {
        const uint64_t first = static_cast<uint64_t>(c) * kChunk;
        const int64_t n = static_cast<int64_t>(finite_chunk(first, in));
        const mf::Fp4Spec s{.tile_cols = 16, .rounding = mf::Fp4Rounding::stochastic, .seed = first};
        const mf::Fp4Result a = mf::fp4_cast(s, in.data(), 1, n, ca.data(), sa.data(), da.data());
        const mf::Fp4Result b = mf::fp4_cast_reference(s, in.data(), 1, n, cb.data(), sb.data(), db.data());
        bool same = a.tensor_scale == b.tensor_scale;
        for (int64_t i = 0; i < n; ++i) same = same && ca[i] == cb[i] && da[i] == db[i];
        for (int64_t i = 0; i < (n + 15) / 16; ++i) same = same && sa[i] == sb[i];
        if (!same && bad.fetch_add(1) < 10) {
  #pragma omp critical
          std::printf("MISMATCH in the chunk from 0x%08llx\n", static_cast<unsigned long long>(first));
        }
      }
    }
    EXPECT_EQ(bad.load(), 0u);
  }
}
