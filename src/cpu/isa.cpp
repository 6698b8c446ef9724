#include "mantissa/cpu/isa.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mantissa::cpu {

namespace {

Isa detect() {
  __builtin_cpu_init();
  const bool base = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (!base) return avx2 ? Isa::avx2 : Isa::scalar;
  if (!__builtin_cpu_supports("avx512bf16")) return Isa::avx512;
  return __builtin_cpu_supports("avx512fp16") ? Isa::avx512_bf16_fp16 : Isa::avx512_bf16;
}

Isa parse_isa_env() {
  const char* s = std::getenv("MANTISSA_MAX_ISA");
  if (s == nullptr || *s == '\0') return Isa::avx512_bf16_fp16;
  for (Isa isa : kAllIsas)
    if (std::strcmp(s, isa_name(isa)) == 0) return isa;
  std::fprintf(stderr,
               "mantissa: MANTISSA_MAX_ISA=%s is not one of scalar, avx2, avx512, avx512_bf16, avx512_bf16_fp16; "
               "ignored\n",
               s);
  return Isa::avx512_bf16_fp16;
}

std::atomic<Isa>& isa_cap() {
  static std::atomic<Isa> cap{parse_isa_env()};
  return cap;
}

}  // namespace

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

void set_max_isa(Isa cap) { isa_cap().store(cap); }

Isa max_isa() { return isa_cap().load(); }

Isa active_isa() { return std::min(detected_isa(), isa_cap().load()); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
    case Isa::avx512_bf16_fp16: return "avx512_bf16_fp16";
  }
  return "unknown";
}

}  // namespace mantissa::cpu
