// mantissa::kernels::matmul against a oneDNN matmul primitive created directly
// here, on the GPT reference model's shapes (B*T = 2048 rows, C = 256), fp32
// and bf16, 2 threads. Prints GFLOP/s per case and, at the end, the ratio of
// mantissa's time to raw oneDNN's (target: within 10%), plus what packing the
// constant weight buys.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <dnnl.hpp>
#include <random>
#include <string>
#include <vector>

#include "mantissa/kernels/kernels.hpp"
#include "mantissa/kernels/matmul.hpp"
#include "mantissa/kernels/matmul_route.hpp"

namespace {

using dnnl::memory;
using mantissa::DType;

struct Shape {
  const char* name;
  int64_t M, K, N;
  bool trans_a, trans_b, accumulate, b_constant;
};

// The GPT's linear layers keep weights [in, out] (GPT-2 Conv1D layout).
// Forward: y [2048, N] = x [2048, K] w [K, N] (w constant: may be pre-packed).
// Backward: dx = dy w^T (w stored [N_out, K_out] as the transposed operand);
// dw += x^T dy (x stored [K, M]: transposed A, accumulate).
const Shape kShapes[] = {
    {"fwd_qkv_2048x256x768", 2048, 256, 768, false, false, false, true},
    {"fwd_fc_2048x256x1024", 2048, 256, 1024, false, false, false, true},
    {"fwd_proj_2048x1024x256", 2048, 1024, 256, false, false, false, true},
    {"fwd_attnproj_2048x256x256", 2048, 256, 256, false, false, false, true},
    {"fwd_head_2048x256x256", 2048, 256, 256, false, true, false, true},  // tied wte [V, C]
    {"bwd_dx_qkv_2048x768x256", 2048, 768, 256, false, true, false, false},
    {"bwd_dw_qkv_256x2048x768", 256, 2048, 768, true, false, true, false},
    {"bwd_dx_fc_2048x1024x256", 2048, 1024, 256, false, true, false, false},
    {"bwd_dw_proj_1024x2048x256", 1024, 2048, 256, true, false, true, false},
};

struct Operands {
  std::vector<float> a, b, c;
  std::vector<uint16_t> a16, b16;
};

Operands make_operands(const Shape& s) {
  Operands o;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  o.a.resize(static_cast<size_t>(s.M * s.K));
  o.b.resize(static_cast<size_t>(s.K * s.N));
  o.c.assign(static_cast<size_t>(s.M * s.N), 0.0f);
  for (auto& x : o.a) x = d(rng);
  for (auto& x : o.b) x = d(rng);
  o.a16.resize(o.a.size());
  o.b16.resize(o.b.size());
  mantissa::kernels::f32_to_bf16(o.a16.data(), o.a.data(), static_cast<int64_t>(o.a.size()));
  mantissa::kernels::f32_to_bf16(o.b16.data(), o.b.data(), static_cast<int64_t>(o.b.size()));
  return o;
}

double flops(const Shape& s) { return 2.0 * static_cast<double>(s.M) * static_cast<double>(s.K) * static_cast<double>(s.N); }

void set_counters(benchmark::State& state, const Shape& s) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops(s) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// packed: mantissa may pre-pack the constant weight (b_is_constant); otherwise
// every call passes the plain weight.
struct MantissaCase {
  Operands o;
  mantissa::kernels::MatmulArgs args;
  const void* A;
  const void* B;
  MantissaCase(const Shape& s, bool bf16, bool packed) : o(make_operands(s)) {
    const DType type = bf16 ? DType::bf16 : DType::f32;
    args = mantissa::kernels::MatmulArgs::product(s.M, s.N, s.K, s.trans_a, s.trans_b)
               .with_accumulate(s.accumulate)
               .with_types(type, type);
    if (packed) args.with_constant_b(o.b.data(), 0);
    A = bf16 ? static_cast<const void*>(o.a16.data()) : o.a.data();
    B = bf16 ? static_cast<const void*>(o.b16.data()) : o.b.data();
  }
  void run() { mantissa::kernels::matmul(args, A, B, o.c.data()); }
  std::string impl() const { return mantissa::kernels::last_matmul_impl(); }
};

// The same product as one oneDNN primitive built here; with packed, the
// weight is reordered into the primitive's preferred layout once, up front.
struct RawCase {
  Operands o;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  memory a_mem, b_mem, c_mem;
  RawCase(const Shape& s, bool bf16, bool packed) : o(make_operands(s)) {
    const auto dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    memory::desc a_md({s.M, s.K}, dt, s.trans_a ? memory::dims{1, s.M} : memory::dims{s.K, 1});
    memory::desc b_plain({s.K, s.N}, dt, s.trans_b ? memory::dims{1, s.K} : memory::dims{s.N, 1});
    memory::desc c_md({s.M, s.N}, memory::data_type::f32, memory::dims{s.N, 1});
    memory::desc b_md = packed ? memory::desc({s.K, s.N}, dt, memory::format_tag::any) : b_plain;
    dnnl::primitive_attr attr;
    if (s.accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, eng);
    prim = dnnl::matmul(pd);
    void* A = bf16 ? static_cast<void*>(o.a16.data()) : o.a.data();
    void* B = bf16 ? static_cast<void*>(o.b16.data()) : o.b.data();
    a_mem = memory(a_md, eng, A);
    c_mem = memory(c_md, eng, o.c.data());
    memory b_src(b_plain, eng, B);
    b_mem = b_src;
    if (packed && pd.weights_desc() != b_plain) {
      b_mem = memory(pd.weights_desc(), eng);
      dnnl::reorder(b_src, b_mem).execute(strm, b_src, b_mem);
      strm.wait();
    }
  }
  void run() {
    prim.execute(strm, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    strm.wait();
  }
  std::string impl() const { return pd.impl_info_str(); }
};

template <class Case>
void bm_case(benchmark::State& state, Shape s, bool bf16, bool packed) {
  Case c(s, bf16, packed);
  for (auto _ : state) {
    c.run();
    benchmark::ClobberMemory();
  }
  state.SetLabel(c.impl());
  set_counters(state, s);
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Paired {
  double wall_m, wall_r, cpu_m, cpu_r;  // median seconds per call
};

// Paired timing: mantissa and raw calls alternate, so load on a shared machine
// hits both alike. Wall time and process CPU time (the latter is what a busy
// machine distorts least: it excludes time spent descheduled).
Paired paired_medians(const Shape& s, bool bf16, bool packed, int reps) {
  MantissaCase m(s, bf16, packed);
  RawCase r(s, bf16, packed);
  m.run();
  r.run();
  std::vector<double> wm, wr, cm, cr;
  for (int i = 0; i < reps; ++i) {
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    m.run();
    const double c1 = cpu_seconds();
    const auto t1 = std::chrono::steady_clock::now();
    r.run();
    const double c2 = cpu_seconds();
    const auto t2 = std::chrono::steady_clock::now();
    wm.push_back(std::chrono::duration<double>(t1 - t0).count());
    wr.push_back(std::chrono::duration<double>(t2 - t1).count());
    cm.push_back(c1 - c0);
    cr.push_back(c2 - c1);
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median(wm), median(wr), median(cm), median(cr)};
}

std::string case_name(const char* who, const Shape& s, bool bf16, bool packed) {
  return std::string(who) + "/" + s.name + (bf16 ? "/bf16" : "/f32") + (packed ? "/packed" : "/plain");
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  if (const char* env = std::getenv("MANTISSA_BENCH_THREADS")) threads = std::max(1, std::atoi(env));
  mantissa::kernels::set_num_threads(threads);
  int reps = 41;
  if (const char* env = std::getenv("MANTISSA_BENCH_REPS")) reps = std::max(1, std::atoi(env));
  // bf16 rows compare with oneDNN's own bf16 primitive, which exists only
  // where mantissa's bf16 products take it (matmul_route.hpp); elsewhere they
  // are fp32 products of widened values, and the f32 rows are their reference.
  std::vector<bool> types{false};
  if (std::string why; !mantissa::kernels::route_available(mantissa::kernels::Bf16Route::onednn_bf16, &why))
    std::printf("bf16 rows skipped: %s\n", why.c_str());
  else if (mantissa::kernels::bf16_route() != mantissa::kernels::Bf16Route::onednn_bf16)
    std::printf("bf16 rows skipped: bf16 products take the %s route here\n",
                mantissa::kernels::route_name(mantissa::kernels::bf16_route()));
  else
    types.push_back(true);
  for (const Shape& s : kShapes) {
    for (bool bf16 : types) {
      for (bool packed : {false, true}) {
        if (packed && !s.b_constant) continue;
        benchmark::RegisterBenchmark(case_name("mantissa", s, bf16, packed).c_str(), bm_case<MantissaCase>, s,
                                     bf16, packed)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(case_name("raw", s, bf16, packed).c_str(), bm_case<RawCase>, s, bf16,
                                     packed)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();

  std::printf("\nPaired medians over %d alternating calls, %d threads (wall: GFLOP/s; cpu: process CPU time)\n",
              reps, mantissa::kernels::num_threads());
  std::printf("%-27s %-4s %-6s %9s %9s %7s %9s %9s %7s\n", "shape", "type", "B", "m wall", "raw wall", "m/raw",
              "m GF/s", "raw GF/s", "cpu m/r");
  double worst_wall = 0, worst_cpu = 0;
  for (const Shape& s : kShapes) {
    for (bool bf16 : types) {
      double plain_cpu = 0;
      for (bool packed : {false, true}) {
        if (packed && !s.b_constant) continue;
        const Paired p = paired_medians(s, bf16, packed, reps);
        worst_wall = std::max(worst_wall, p.wall_m / p.wall_r);
        worst_cpu = std::max(worst_cpu, p.cpu_m / p.cpu_r);
        std::printf("%-27s %-4s %-6s %7.0fus %7.0fus %7.3f %9.1f %9.1f %7.3f\n", s.name, bf16 ? "bf16" : "f32",
                    packed ? "packed" : "plain", p.wall_m * 1e6, p.wall_r * 1e6, p.wall_m / p.wall_r,
                    flops(s) / p.wall_m * 1e-9, flops(s) / p.wall_r * 1e-9, p.cpu_m / p.cpu_r);
        if (!packed) {
          plain_cpu = p.cpu_m;
        } else {
          std::printf("%-27s %-4s packing: plain/packed cpu time = %.3f\n", s.name, bf16 ? "bf16" : "f32",
                      plain_cpu / p.cpu_m);
        }
      }
    }
  }
  std::printf("worst mantissa/raw: wall %.3f, cpu %.3f (target <= 1.10)\n", worst_wall, worst_cpu);
  // The wrapper's fixed cost per call (cache lookup, memory objects), visible
  // only on a product too small to hide it.
  const Shape tiny{"tiny_16x16x16", 16, 16, 16, false, false, false, false};
  const Paired p = paired_medians(tiny, false, false, reps * 50);
  std::printf("fixed overhead per call (16x16x16 f32): mantissa %.2fus, raw %.2fus cpu, difference %.2fus\n",
              p.cpu_m * 1e6, p.cpu_r * 1e6, (p.cpu_m - p.cpu_r) * 1e6);
  benchmark::Shutdown();
  return 0;
}
