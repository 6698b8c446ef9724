// mantissa::kernels::matmul against a oneDNN matmul primitive created directly
// here, on the GPT reference model's shapes (B*T = 2048 rows, C = 256), fp32
// and bf16, 2 threads. Prints GFLOP/s per case and, at the end, the ratio of
// mantissa's time to raw oneDNN's (target: within 10%), plus what packing the
// constant weight buys.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdio>
#include <dnnl.hpp>
#include <map>
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

// Forward: activations [2048, K] x weight stored [N, K] (a linear layer).
// Backward: dX = dY W (weight plain [K, N]); dW += dY^T X (dY stored [K, M]).
const Shape kShapes[] = {
    {"fwd_qkv_2048x256x768", 2048, 256, 768, false, true, false, true},
    {"fwd_fc_2048x256x1024", 2048, 256, 1024, false, true, false, true},
    {"fwd_proj_2048x1024x256", 2048, 1024, 256, false, true, false, true},
    {"fwd_attnproj_2048x256x256", 2048, 256, 256, false, true, false, true},
    {"fwd_head_2048x256x256", 2048, 256, 256, false, true, false, true},
    {"bwd_dx_qkv_2048x768x256", 2048, 768, 256, false, false, false, true},
    {"bwd_dw_qkv_768x2048x256", 768, 2048, 256, true, false, true, false},
    {"bwd_dx_proj_2048x256x1024", 2048, 256, 1024, false, false, false, true},
    {"bwd_dw_proj_256x2048x1024", 256, 2048, 1024, true, false, true, false},
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
void bm_mantissa(benchmark::State& state, Shape s, bool bf16, bool packed) {
  Operands o = make_operands(s);
  mantissa::kernels::MatmulArgs args;
  args.M = s.M;
  args.N = s.N;
  args.K = s.K;
  args.trans_a = s.trans_a;
  args.trans_b = s.trans_b;
  args.accumulate = s.accumulate;
  args.a_type = args.b_type = bf16 ? DType::bf16 : DType::f32;
  args.b_is_constant = packed;
  args.b_cache_key = packed ? o.b.data() : nullptr;
  const void* A = bf16 ? static_cast<const void*>(o.a16.data()) : o.a.data();
  const void* B = bf16 ? static_cast<const void*>(o.b16.data()) : o.b.data();
  for (auto _ : state) {
    mantissa::kernels::matmul(args, A, B, o.c.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(mantissa::kernels::last_matmul_impl());
  set_counters(state, s);
}

// The same product as one oneDNN primitive built here; with packed, the
// weight is reordered into the primitive's preferred layout once, outside the loop.
void bm_raw(benchmark::State& state, Shape s, bool bf16, bool packed) {
  Operands o = make_operands(s);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
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
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, eng);
  dnnl::matmul prim(pd);
  void* A = bf16 ? static_cast<void*>(o.a16.data()) : o.a.data();
  void* B = bf16 ? static_cast<void*>(o.b16.data()) : o.b.data();
  memory a_mem(a_md, eng, A), b_src(b_plain, eng, B), c_mem(c_md, eng, o.c.data());
  memory b_mem = b_src;
  if (packed && pd.weights_desc() != b_plain) {
    b_mem = memory(pd.weights_desc(), eng);
    dnnl::reorder(b_src, b_mem).execute(strm, b_src, b_mem);
    strm.wait();
  }
  for (auto _ : state) {
    prim.execute(strm, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    strm.wait();
    benchmark::ClobberMemory();
  }
  state.SetLabel(pd.impl_info_str());
  set_counters(state, s);
}

// Collects real time per benchmark name so main can print ratios.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> ns;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type == Run::RT_Iteration && !r.error_occurred) {
        ns[r.benchmark_name()] = r.GetAdjustedRealTime();
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

std::string case_name(const char* who, const Shape& s, bool bf16, bool packed) {
  return std::string(who) + "/" + s.name + (bf16 ? "/bf16" : "/f32") + (packed ? "/packed" : "/plain");
}

}  // namespace

int main(int argc, char** argv) {
  mantissa::kernels::set_num_threads(2);
  for (const Shape& s : kShapes) {
    for (bool bf16 : {false, true}) {
      for (bool packed : {false, true}) {
        if (packed && !s.b_constant) continue;
        benchmark::RegisterBenchmark(case_name("mantissa", s, bf16, packed).c_str(), bm_mantissa, s, bf16, packed)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(case_name("raw", s, bf16, packed).c_str(), bm_raw, s, bf16, packed)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  std::printf("\n%-28s %-5s %-6s %10s %10s %8s %10s\n", "shape", "type", "B", "mantissa", "raw",
              "m/raw", "GFLOP/s");
  for (const Shape& s : kShapes) {
    for (bool bf16 : {false, true}) {
      for (bool packed : {false, true}) {
        auto m = reporter.ns.find(case_name("mantissa", s, bf16, packed) + "/real_time");
        auto r = reporter.ns.find(case_name("raw", s, bf16, packed) + "/real_time");
        if (m == reporter.ns.end() || r == reporter.ns.end()) continue;
        std::printf("%-28s %-5s %-6s %8.1fus %8.1fus %8.3f %10.1f\n", s.name, bf16 ? "bf16" : "f32",
                    packed ? "packed" : "plain", m->second, r->second, m->second / r->second,
                    flops(s) / (m->second * 1e3));
      }
      auto plain = reporter.ns.find(case_name("mantissa", s, bf16, false) + "/real_time");
      auto packed = reporter.ns.find(case_name("mantissa", s, bf16, true) + "/real_time");
      if (plain != reporter.ns.end() && packed != reporter.ns.end()) {
        std::printf("%-28s %-5s packing speed-up (plain/packed time): %.3f\n", s.name, bf16 ? "bf16" : "f32",
                    plain->second / packed->second);
      }
    }
  }
  benchmark::Shutdown();
  return 0;
}
