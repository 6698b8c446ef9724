// The instruction sets of the host, a cap on them, and the choice of a
// kernel implementation from an ordered table (as oneDNN does): every kernel
// family lists its implementations best first, each with the instruction set
// it needs and, where it applies only to some inputs, a test; the first entry
// the active set allows and whose test passes runs. The last entry of every
// table is the portable one, so a table always yields an implementation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mantissa::cpu {

// Levels in order; each includes the ones below. avx2 is AVX2+FMA+F16C (AMD
// Zen 1-3, Intel client cores since Haswell); avx512 is F+BW+VL+DQ;
// avx512_bf16 adds vcvtneps2bf16 and vdpbf16ps and needs no AVX512-FP16 (e.g.
// AMD Zen 4); avx512_bf16_fp16 is a CPU with both extensions (e.g. Sapphire
// Rapids) and adds no kernel of its own.
enum class Isa : uint8_t { scalar, avx2, avx512, avx512_bf16, avx512_bf16_fp16 };
inline constexpr Isa kAllIsas[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::avx512_bf16_fp16};

Isa detected_isa();  // what the host offers (cpuid, read once)
// Cap the instruction set (for comparison runs and tests); also read once from
// the environment variable MANTISSA_MAX_ISA = scalar|avx2|avx512|avx512_bf16|avx512_bf16_fp16.
void set_max_isa(Isa cap);
Isa max_isa();
Isa active_isa();  // min(detected, cap): what kernels may use
const char* isa_name(Isa isa);

// One implementation of a kernel family: `Fn` is its function pointer type,
// `applies` (optional) restricts it to the inputs it handles bit-exactly.
template <class Fn, class Arg = int>
struct Impl {
  const char* name;  // "<isa>:<kernel>", what the family reports
  Isa needs;
  Fn fn;
  bool (*applies)(const Arg&) = nullptr;
};

// The first entry of `table` that the active instruction set allows and that
// applies to `arg`. The last entry must need Isa::scalar and apply always.
template <class Fn, class Arg, std::size_t N>
const Impl<Fn, Arg>& select(const Impl<Fn, Arg> (&table)[N], const Arg& arg) {
  const Isa isa = active_isa();
  for (const auto& impl : table)
    if (impl.needs <= isa && (impl.applies == nullptr || impl.applies(arg))) return impl;
  return table[N - 1];
}

template <class Fn, std::size_t N>
const Impl<Fn>& select(const Impl<Fn> (&table)[N]) {
  const Isa isa = active_isa();
  for (const auto& impl : table)
    if (impl.needs <= isa) return impl;
  return table[N - 1];
}

}  // namespace mantissa::cpu
