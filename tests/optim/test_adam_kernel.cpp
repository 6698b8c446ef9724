// Adam's chunk kernel under every ISA cap the host has: the vector paths
// (AVX2, AVX-512) give adam_element's bits on every lane and every tail
// length, for ordinary moments and for zeros, subnormals, huge values, infs
// and NaNs, with and without coupled (L2) or decoupled weight decay.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mantissa/cpu/isa.hpp"
#include "optim/adam_kernel.hpp"

namespace {

namespace cpu = mantissa::cpu;
using mantissa::optim::detail::adam_chunk;
using mantissa::optim::detail::adam_chunk_scalar;
using mantissa::optim::detail::adam_implementation;
using mantissa::optim::detail::AdamScalars;

struct Cap {
  explicit Cap(cpu::Isa isa) : before(cpu::max_isa()) { cpu::set_max_isa(isa); }
  ~Cap() { cpu::set_max_isa(before); }
  cpu::Isa before;
};

// Random values with a sprinkling of the edge cases.
std::vector<float> values(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  const float special[] = {0.0f, -0.0f, 1e-40f, -1e-42f, 3e38f, -3e38f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> v(n);
  for (auto& x : v) x = rng() % 16 == 0 ? special[rng() % std::size(special)] : dist(rng);
  return v;
}

// Equal bits, or both NaN (a NaN's payload is whichever operand x86 passes on).
bool same(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (a != a && b != b); }

TEST(AdamKernel, EveryCapGivesTheScalarBitsOnEveryTail) {
  const AdamScalars adamw{1.0f - 1e-3f * 0.1f, 0.0f, 0.1f, 0.999f, 1e-3f, 1e-3f / 0.271f, 1.0f / 0.0447f, 1e-8f};
  const AdamScalars adam_l2{1.0f, 0.01f, 0.1f, 0.95f, 0.05f, 3e-4f, 7.1f, 1e-6f};
  for (const AdamScalars& s : {adamw, adam_l2}) {
    for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 1000}) {
      const auto p0 = values(size_t(n), 1, -2.0f, 2.0f), g0 = values(size_t(n), 2, -1.0f, 1.0f);
      const auto m0 = values(size_t(n), 3, -0.1f, 0.1f);
      auto v0 = values(size_t(n), 4, 0.0f, 0.01f);
      for (auto& x : v0) x = std::abs(x);  // a second moment is never negative
      auto pr = p0, mr = m0, vr = v0;
      adam_chunk_scalar(pr.data(), g0.data(), mr.data(), vr.data(), n, s);
      for (cpu::Isa isa : cpu::kAllIsas) {
        if (isa > cpu::detected_isa()) continue;
        Cap cap(isa);
        const std::string name = adam_implementation();
        EXPECT_EQ(name.substr(0, name.find(':')), isa >= cpu::Isa::avx512 ? "avx512"
                                                  : isa >= cpu::Isa::avx2 ? "avx2"
                                                                          : "scalar");
        auto p = p0, m = m0, v = v0;
        adam_chunk(p.data(), g0.data(), m.data(), v.data(), n, s);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_TRUE(same(p[i], pr[i])) << name << " n=" << n << " i=" << i;
          ASSERT_TRUE(same(m[i], mr[i])) << name << " n=" << n << " i=" << i;
          ASSERT_TRUE(same(v[i], vr[i])) << name << " n=" << n << " i=" << i;
        }
      }
    }
  }
}

}  // namespace
