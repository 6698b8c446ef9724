// How a product of bf16-valued operands (bf16 x bf16, or FP8 decoded to bf16)
// with fp32 accumulation is executed on this CPU. Every route gives the same
// products: a product of two bf16 values is exact in fp32, so only the order
// of the fp32 summation differs between routes (and vdpbf16ps flushes
// subnormal inputs and results to zero, which the fp32 route does not).
//
// Routes, best first; the first one whose condition holds is taken:
//   onednn_bf16   oneDNN's bf16 matmul, when oneDNN runs AMX (amx_bf16 tiles):
//                 several times the fp32 rate;
//   onednn_bf16   also when oneDNN runs avx512_core_bf16 and this core's
//                 vdpbf16ps rate is at least 1.5x its fp32 FMA rate (measured
//                 once, register_peak_gflops: e.g. AMD Zen 4/5, where oneDNN's
//                 bf16 GEMM runs at twice its fp32 rate);
//   f32_widened   otherwise: the operands widened exactly to fp32 (a weight
//                 once per version, inside the packed-operand cache) and
//                 multiplied by oneDNN's fp32 matmul. Where vdpbf16ps is no
//                 faster than FMA (Intel cores without AMX) oneDNN 2.6's bf16
//                 GEMM runs at about half its fp32 rate; without bf16
//                 instructions it emulates them.
// The ISA is oneDNN's effective one (dnnl::get_effective_cpu_isa), so
// ONEDNN_MAX_CPU_ISA caps it. MANTISSA_BF16_MATMUL=auto|onednn_bf16|f32_widened
// (or set_bf16_route) forces a route, for comparison runs and tests.
//
// fp16 products always take the fp32 primitive over exactly widened operands
// (matmul.cpp). The one exact alternative on AMX, splitting every fp16 value
// into two bf16 values (hi + lo) and running one bf16 product over 4K terms,
// was measured slower on a 2-vCPU Sapphire Rapids: 0.66-1.10x the widened
// product per GPT shape, 0.83x for the whole fp16-amp step, because AMX's
// bf16 rate on these shapes (450-900 GFLOP/s a core) is under 4x fp32's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mantissa::kernels {

enum class Bf16Route { onednn_bf16, f32_widened };

const char* route_name(Bf16Route r);
// The route bf16 products take now (override, else the ISA rule above).
Bf16Route bf16_route();
// Forces a route (nullopt: back to the ISA rule / environment).
void set_bf16_route(std::optional<Bf16Route> route);
// Whether the route can run here: onednn_bf16 needs oneDNN's AVX-512 (or AMX)
// kernels, none exist below avx512_core; `why_not` gets the reason otherwise.
bool route_available(Bf16Route r, std::string* why_not = nullptr);
// oneDNN's effective CPU ISA, e.g. "avx512_core_bf16", "avx512_core_amx".
const char* matmul_isa_name();
bool matmul_isa_has_amx();
// The measured vdpbf16ps / fp32 FMA rate ratio the rule used (0: not measured,
// e.g. AMX, no bf16 instructions, or a forced route).
double bf16_dot_to_fma_ratio();
// One line for reports: "bf16 products: f32_widened (oneDNN ISA avx512_core_bf16, no AMX,
// vdpbf16ps/FMA 1.02)".
std::string matmul_route_summary();

// Register-level rate of one thread (GFLOP/s) over `iters` x 24 instructions:
// fp32 FMA (2 flops a lane) or vdpbf16ps (4); 0 without the instruction.
enum class RegisterOp { fma_f32, dpbf16 };
double register_peak_gflops(RegisterOp op, int64_t iters);

}  // namespace mantissa::kernels
