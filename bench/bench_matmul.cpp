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
#include <dnnl.hpp>
#include <random>
#include <string>
#include <vector>

#include "mantissa/kernels/kernels.hpp"
#include "mantissa/kernels/matmul.hpp"

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
    args.M = s.M;
    args.N = s.N;
    args.K = s.K;
    args.trans_a = s.trans_a;
    args.trans_b = s.trans_b;
    args.accumulate = s.accumulate;
    args.a_type = args.b_type = bf16 ? DType::bf16 : DType::f32;
    args.b_is_constant = packed;
    args.b_cache_key = packed ? o.b.data() : nullptr;
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

// Paired timing: mantissa and raw calls alternate, so load on a shared machine
// hits both alike; returns the median seconds of each.
std::pair<double, double> paired_medians(const Shape& s, bool bf16, bool packed, int reps) {
  MantissaCase m(s, bf16, packed);
  RawCase r(s, bf16, packed);
  m.run();
  r.run();
  std::vector<double> tm, tr;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    m.run();
    auto t1 = std::chrono::steady_clock::now();
    r.run();
    auto t2 = std::chrono::steady_clock::now();
    tm.push_back(std::chrono::duration<double>(t1 - t0).count());
    tr.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median(tm), median(tr)};
}

std::string case_name(const char* who, const Shape& s, bool bf16, bool packed) {
  return std::string(who) + "/" + s.name + (bf16 ? "/bf16" : "/f32") + (packed ? "/packed" : "/plain");
}

}  // namespace

int main(int argc, char** argv) {
  mantissa::kernels::set_num_threads(2);
  int reps = 41;
  if (const char* env = std::getenv("MANTISSA_BENCH_REPS")) reps = std::max(1, std::atoi(env));
  for (const Shape& s : kShapes) {
    for (bool bf16 : {false, true}) {
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

  std::printf("\nPaired medians over %d alternating calls (2 threads)\n", reps);
  std::printf("%-28s %-5s %-6s %11s %11s %7s %9s %9s\n", "shape", "type", "B", "mantissa", "raw", "m/raw",
              "m GFLOP/s", "raw GF/s");
  double worst = 0;
  for (const Shape& s : kShapes) {
    for (bool bf16 : {false, true}) {
      double plain_time = 0;
      for (bool packed : {false, true}) {
        if (packed && !s.b_constant) continue;
        auto [tm, tr] = paired_medians(s, bf16, packed, reps);
        worst = std::max(worst, tm / tr);
        std::printf("%-28s %-5s %-6s %9.1fus %9.1fus %7.3f %9.1f %9.1f\n", s.name, bf16 ? "bf16" : "f32",
                    packed ? "packed" : "plain", tm * 1e6, tr * 1e6, tm / tr, flops(s) / tm * 1e-9,
                    flops(s) / tr * 1e-9);
        if (!packed) {
          plain_time = tm;
        } else {
          std::printf("%-28s %-5s packing pays: plain/packed time = %.3f\n", s.name, bf16 ? "bf16" : "f32",
                      plain_time / tm);
        }
      }
    }
  }
  std::printf("worst mantissa/raw ratio: %.3f (target <= 1.10)\n", worst);
  benchmark::Shutdown();
  return 0;
}
