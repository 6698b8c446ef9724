// Route choice for bf16-valued products (see matmul_route.hpp).
#include "mantissa/kernels/matmul_route.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>

namespace mantissa::kernels {
namespace {

// -1: no override; else a Bf16Route value.
int parse_route_env() {
  const char* s = std::getenv("MANTISSA_BF16_MATMUL");
  if (s == nullptr || *s == '\0' || std::strcmp(s, "auto") == 0) return -1;
  for (Bf16Route r : {Bf16Route::onednn_bf16, Bf16Route::f32_widened})
    if (std::strcmp(s, route_name(r)) == 0) return static_cast<int>(r);
  std::fprintf(stderr, "mantissa: MANTISSA_BF16_MATMUL=%s is not one of auto, onednn_bf16, f32_widened; ignored\n", s);
  return -1;
}

std::atomic<int>& route_override() {
  static std::atomic<int> r{parse_route_env()};
  return r;
}

struct IsaInfo {
  const char* name;
  bool amx;
};

IsaInfo isa_info() {
  using dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case cpu_isa::avx512_core_amx: return {"avx512_core_amx", true};
    case cpu_isa::avx512_core_bf16: return {"avx512_core_bf16", false};
    case cpu_isa::avx512_core_vnni: return {"avx512_core_vnni", false};
    case cpu_isa::avx512_core: return {"avx512_core", false};
    case cpu_isa::avx2_vnni: return {"avx2_vnni", false};
    case cpu_isa::avx2: return {"avx2", false};
    case cpu_isa::avx: return {"avx", false};
    case cpu_isa::sse41: return {"sse41", false};
    default: return {"other", false};
  }
}

const IsaInfo& cached_isa() {
  static const IsaInfo info = isa_info();
  return info;
}

}  // namespace

const char* route_name(Bf16Route r) { return r == Bf16Route::onednn_bf16 ? "onednn_bf16" : "f32_widened"; }

Bf16Route bf16_route() {
  const int o = route_override().load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<Bf16Route>(o);
  return cached_isa().amx ? Bf16Route::onednn_bf16 : Bf16Route::f32_widened;
}

void set_bf16_route(std::optional<Bf16Route> route) {
  route_override().store(route ? static_cast<int>(*route) : parse_route_env(), std::memory_order_relaxed);
}

const char* matmul_isa_name() { return cached_isa().name; }
bool matmul_isa_has_amx() { return cached_isa().amx; }

std::string matmul_route_summary() {
  return std::string("bf16 products: ") + route_name(bf16_route()) + " (oneDNN ISA " + matmul_isa_name() +
         (matmul_isa_has_amx() ? ", AMX)" : ", no AMX)");
}

}  // namespace mantissa::kernels
