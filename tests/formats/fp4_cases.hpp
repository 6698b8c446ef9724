// Shared by the FP4 cast tests: one cast's outputs (filled with 0xEE first,
// so unwritten bytes show), a heavy-tailed input over many binades, and the
// ISA caps that run a vector path (each tier the host has, avx2 and up).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "mantissa/cpu/isa.hpp"
#include "mantissa/formats/fp4.hpp"

namespace fp4_cases {

namespace mf = mantissa::formats;
namespace cpu = mantissa::cpu;

// Every cap from avx2 to what the host has (empty on a host without AVX2).
inline std::vector<cpu::Isa> vector_caps() {
  std::vector<cpu::Isa> out;
  for (cpu::Isa isa : cpu::kAllIsas)
    if (isa >= cpu::Isa::avx2 && isa <= cpu::detected_isa()) out.push_back(isa);
  return out;
}

// Sets a cap for one scope and restores the previous one.
struct Cap {
  explicit Cap(cpu::Isa isa) : before(cpu::max_isa()) { cpu::set_max_isa(isa); }
  ~Cap() { cpu::set_max_isa(before); }
  Cap(const Cap&) = delete;
  Cap& operator=(const Cap&) = delete;
  cpu::Isa before;
};

struct Out {
  std::vector<uint8_t> codes, scales;
  std::vector<uint16_t> dec;
  mf::Fp4Result r;
};

// The vector path (fp4_cast) or the scalar reference; codes sized for spec.packed.
inline Out run(bool vector, const mf::Fp4Spec& s, const std::vector<float>& x, int64_t rows, int64_t cols) {
  Out o;
  const int64_t n = rows * cols;
  o.codes.assign(static_cast<size_t>(s.packed ? (n + 1) / 2 : n), 0xEE);
  o.scales.assign(static_cast<size_t>(mf::fp4_tile_count(s, rows, cols)), 0xEE);
  o.dec.assign(static_cast<size_t>(n), 0xEEEE);
  o.r = vector ? mf::fp4_cast(s, x.data(), rows, cols, o.codes.data(), o.scales.data(), o.dec.data())
               : mf::fp4_cast_reference(s, x.data(), rows, cols, o.codes.data(), o.scales.data(), o.dec.data());
  return o;
}

inline std::vector<float> heavy_tailed(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::student_t_distribution<float> t(2.0f);
  std::uniform_int_distribution<int> e(-20, 20);
  std::vector<float> x(n);
  for (auto& v : x) v = std::ldexp(t(g), e(g) / 4);
  return x;
}

}  // namespace fp4_cases
