// Route choice for bf16-valued products (see matmul_route.hpp).
#include "mantissa/kernels/matmul_route.hpp"

#include <algorithm>
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
  bool avx512;  // avx512_core or above: oneDNN has bf16 matmul kernels
  bool amx;
  bool bf16_dot;  // oneDNN runs vdpbf16ps (avx512_core_bf16) without AMX
};

IsaInfo isa_info() {
  using dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case cpu_isa::avx512_core_amx: return {"avx512_core_amx", true, true, false};
    case cpu_isa::avx512_core_bf16: return {"avx512_core_bf16", true, false, true};
    case cpu_isa::avx512_core_vnni: return {"avx512_core_vnni", true, false, false};
    case cpu_isa::avx512_core: return {"avx512_core", true, false, false};
    case cpu_isa::avx2_vnni: return {"avx2_vnni", false, false, false};
    case cpu_isa::avx2: return {"avx2", false, false, false};
    case cpu_isa::avx: return {"avx", false, false, false};
    case cpu_isa::sse41: return {"sse41", false, false, false};
    default: return {"other", false, false, false};
  }
}

const IsaInfo& cached_isa() {
  static const IsaInfo info = isa_info();
  return info;
}

// vdpbf16ps rate over fp32 FMA rate on this core: best of 5 alternating
// short runs of each (about 0.3 ms each; a run another process interrupts
// only comes out slower, so the best is the machine's).
double measure_dot_ratio() {
  constexpr int64_t kIters = int64_t{1} << 12;
  double fma = 0, dot = 0;
  for (int i = 0; i < 5; ++i) {
    fma = std::max(fma, register_peak_gflops(RegisterOp::fma_f32, kIters));
    dot = std::max(dot, register_peak_gflops(RegisterOp::dpbf16, kIters));
  }
  return fma > 0 ? dot / fma : 0;
}

// Ratio >= this: the bf16 dot-product units are wider than the FMA's, oneDNN's bf16 GEMM wins.
constexpr double kWideDotRatio = 1.5;

double cached_dot_ratio() {
  static const double r = cached_isa().bf16_dot ? measure_dot_ratio() : 0.0;
  return r;
}

}  // namespace

const char* route_name(Bf16Route r) { return r == Bf16Route::onednn_bf16 ? "onednn_bf16" : "f32_widened"; }

Bf16Route bf16_route() {
  const int o = route_override().load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<Bf16Route>(o);
  if (cached_isa().amx) return Bf16Route::onednn_bf16;
  return cached_dot_ratio() >= kWideDotRatio ? Bf16Route::onednn_bf16 : Bf16Route::f32_widened;
}

double bf16_dot_to_fma_ratio() { return cached_dot_ratio(); }

void set_bf16_route(std::optional<Bf16Route> route) {
  route_override().store(route ? static_cast<int>(*route) : parse_route_env(), std::memory_order_relaxed);
}

bool route_available(Bf16Route r, std::string* why_not) {
  if (r == Bf16Route::f32_widened || cached_isa().avx512) return true;
  if (why_not != nullptr) {
    *why_not = std::string("oneDNN has no bf16 matmul below avx512_core (its ISA here: ") + cached_isa().name + ")";
  }
  return false;
}

const char* matmul_isa_name() { return cached_isa().name; }
bool matmul_isa_has_amx() { return cached_isa().amx; }

std::string matmul_route_summary() {
  std::string s = std::string("bf16 products: ") + route_name(bf16_route()) + " (oneDNN ISA " +
                  matmul_isa_name() + (matmul_isa_has_amx() ? ", AMX" : ", no AMX");
  if (cached_dot_ratio() > 0) {
    char buf[48];
    std::snprintf(buf, sizeof buf, ", vdpbf16ps/FMA %.2f", cached_dot_ratio());
    s += buf;
  }
  return s + ")";
}

}  // namespace mantissa::kernels
