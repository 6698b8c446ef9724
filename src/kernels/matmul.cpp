// oneDNN matmul wrapper: one CPU engine and stream, primitives cached per
// (shape, types, transposes, alpha, accumulate, bias, packed-B), constant B
// operands reordered once into the primitive's preferred (blocked) layout and
// kept until their version changes.
#include "mantissa/kernels/matmul.hpp"

#include <omp.h>

#include <cstring>
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/bf16_convert.hpp"
#include "mantissa/kernels/profile.hpp"

namespace mantissa::kernels {
namespace {

using dnnl::memory;

struct Key {
  int64_t batch, M, N, K;
  bool trans_a, trans_b, accumulate, has_bias, packed_b;
  bool bf16;  // both operands bf16 (else both f32)
  uint32_t alpha_bits;
  int threads;  // oneDNN fixes its work split when the primitive is created
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<uint64_t>(k.batch));
    mix(static_cast<uint64_t>(k.M));
    mix(static_cast<uint64_t>(k.N));
    mix(static_cast<uint64_t>(k.K));
    mix((k.trans_a ? 1u : 0u) | (k.trans_b ? 2u : 0u) | (k.accumulate ? 4u : 0u) |
        (k.has_bias ? 8u : 0u) | (k.packed_b ? 16u : 0u) | (k.bf16 ? 32u : 0u));
    mix(k.alpha_bits);
    mix(static_cast<uint64_t>(k.threads));
    return static_cast<size_t>(h);
  }
};

struct Packed {
  int version = 0;
  memory mem;
};

struct Entry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  memory::desc a_md, b_plain_md, c_md, bias_md;
  bool b_needs_reorder = false;
  bool bias_post_op = false;  // bias via binary post-op at this index
  int bias_post_op_index = 0;
  std::string impl;
  std::unordered_map<const void*, Packed> packed;  // keyed by the caller's b_cache_key
};

struct State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mu;
  std::unordered_map<Key, std::shared_ptr<Entry>, KeyHash> cache;
  std::string last_impl = "none";
};

State& state() {
  static State s;
  return s;
}

memory::dims dims_of(int64_t batch, int64_t rows, int64_t cols) {
  if (batch == 1) return {rows, cols};
  return {batch, rows, cols};
}

// Row-major [rows, cols] per batch, or its transpose stored [cols, rows].
memory::desc plain_md(int64_t batch, int64_t rows, int64_t cols, memory::data_type dt,
                      bool transposed) {
  memory::dims strides = transposed ? memory::dims{1, rows} : memory::dims{cols, 1};
  if (batch != 1) strides.insert(strides.begin(), rows * cols);
  return memory::desc(dims_of(batch, rows, cols), dt, strides);
}

std::shared_ptr<Entry> make_entry(const Key& k, State& st) {
  const auto dt = k.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  auto e = std::make_shared<Entry>();
  e->a_md = plain_md(k.batch, k.M, k.K, dt, k.trans_a);
  e->b_plain_md = plain_md(k.batch, k.K, k.N, dt, k.trans_b);
  e->c_md = plain_md(k.batch, k.M, k.N, memory::data_type::f32, false);
  memory::desc b_md = e->b_plain_md;
  if (k.packed_b) b_md = memory::desc(dims_of(k.batch, k.K, k.N), dt, memory::format_tag::any);
  dnnl::primitive_attr attr;
  float alpha;
  std::memcpy(&alpha, &k.alpha_bits, sizeof alpha);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (k.has_bias) {  // [N] broadcast over rows (and batch)
    e->bias_md = k.batch == 1 ? memory::desc({1, k.N}, memory::data_type::f32, memory::dims{k.N, 1})
                              : memory::desc({1, 1, k.N}, memory::data_type::f32,
                                             memory::dims{k.N, k.N, 1});
  }
  // oneDNN scales the bias together with the product (alpha (AB + bias)), so
  // with alpha != 1 the bias is added by a binary post-op after the scaling.
  e->bias_post_op = k.has_bias && alpha != 1.0f;
  dnnl::post_ops ops;
  if (k.accumulate) ops.append_sum(1.0f);
  if (e->bias_post_op) {
    e->bias_post_op_index = ops.len();
    ops.append_binary(dnnl::algorithm::binary_add, e->bias_md);
  }
  if (ops.len() > 0) attr.set_post_ops(ops);
  auto desc = k.has_bias && !e->bias_post_op ? dnnl::matmul::desc(e->a_md, b_md, e->bias_md, e->c_md)
                                             : dnnl::matmul::desc(e->a_md, b_md, e->c_md);
  e->pd = dnnl::matmul::primitive_desc(desc, attr, st.engine);
  e->prim = dnnl::matmul(e->pd);
  e->b_needs_reorder = k.packed_b && e->pd.weights_desc() != e->b_plain_md;
  e->impl = e->pd.impl_info_str();
  return e;
}

void check_args(const MatmulArgs& a) {
  if (a.batch < 1 || a.M < 0 || a.N < 0 || a.K < 0) {
    throw std::invalid_argument("matmul: bad shape batch=" + std::to_string(a.batch) +
                                " M=" + std::to_string(a.M) + " N=" + std::to_string(a.N) +
                                " K=" + std::to_string(a.K));
  }
  for (DType t : {a.a_type, a.b_type}) {
    if (t != DType::f32 && t != DType::bf16) {
      throw std::invalid_argument(std::string("matmul: operand dtype ") + dtype_name(t) +
                                  " unsupported (widen FP8/fp16 to bf16 or f32 first)");
    }
  }
}

// K == 0: the product is empty, C = (accumulate ? C : 0) + bias.
void empty_product(const MatmulArgs& a, float* C, const float* bias) {
  const int64_t rows = a.batch * a.M;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < a.N; ++j) {
      const float v = a.accumulate ? C[r * a.N + j] : 0.0f;
      C[r * a.N + j] = v + (bias ? bias[j] : 0.0f);
    }
  }
}

}  // namespace

void matmul(const MatmulArgs& args, const void* A, const void* B, float* C, const float* bias) {
  kernels::profile::Scope profile_scope(kernels::profile::Category::matmul, 2.0 * static_cast<double>(args.batch) * static_cast<double>(args.M) * static_cast<double>(args.N) * static_cast<double>(args.K));
  check_args(args);
  if (args.M == 0 || args.N == 0) return;
  if (args.K == 0) return empty_product(args, C, bias);

  // Mixed f32/bf16 operands run as bf16 x bf16: the f32 one is rounded to
  // nearest-even bf16 (oneDNN has no mixed-type matmul).
  const bool bf16 = args.a_type == DType::bf16 || args.b_type == DType::bf16;
  thread_local std::vector<uint16_t> a_tmp, b_tmp;
  if (bf16 && args.a_type == DType::f32) {
    const int64_t n = args.batch * args.M * args.K;
    a_tmp.resize(static_cast<size_t>(n));
    f32_to_bf16(a_tmp.data(), static_cast<const float*>(A), n);
    A = a_tmp.data();
  }
  // B is converted lazily: a packed constant B whose version is unchanged
  // needs no conversion at all.
  const bool b_needs_convert = bf16 && args.b_type == DType::f32;
  auto b_operand = [&]() -> void* {
    if (!b_needs_convert) return const_cast<void*>(B);
    const int64_t n = args.batch * args.K * args.N;
    b_tmp.resize(static_cast<size_t>(n));
    f32_to_bf16(b_tmp.data(), static_cast<const float*>(B), n);
    return b_tmp.data();
  };

  uint32_t alpha_bits;
  std::memcpy(&alpha_bits, &args.alpha, sizeof alpha_bits);
  const bool packed = args.b_is_constant && args.b_cache_key != nullptr;
  const Key key{args.batch,   args.M,       args.N,          args.K,          args.trans_a,
                args.trans_b, args.accumulate, bias != nullptr, packed,       bf16,
                alpha_bits,   omp_get_max_threads()};

  State& st = state();
  std::shared_ptr<Entry> e;
  memory b_mem;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.cache.find(key);
    if (it == st.cache.end()) it = st.cache.emplace(key, make_entry(key, st)).first;
    e = it->second;
    st.last_impl = e->impl;
    if (e->b_needs_reorder) {
      Packed& p = e->packed[args.b_cache_key];
      if (!p.mem || p.version != args.b_cache_version) {
        memory src(e->b_plain_md, st.engine, b_operand());
        if (!p.mem) p.mem = memory(e->pd.weights_desc(), st.engine);
        dnnl::reorder(src, p.mem).execute(st.stream, src, p.mem);
        st.stream.wait();
        p.version = args.b_cache_version;
      }
      b_mem = p.mem;
    }
  }
  if (!b_mem) b_mem = memory(e->b_plain_md, st.engine, b_operand());
  memory a_mem(e->a_md, st.engine, const_cast<void*>(A));
  memory c_mem(e->c_md, st.engine, C);
  std::unordered_map<int, memory> exec_args{
      {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
  if (bias) {
    const int slot = e->bias_post_op
                         ? (DNNL_ARG_ATTR_MULTIPLE_POST_OP(e->bias_post_op_index) | DNNL_ARG_SRC_1)
                         : DNNL_ARG_BIAS;
    exec_args.emplace(slot, memory(e->bias_md, st.engine, const_cast<float*>(bias)));
  }
  e->prim.execute(st.stream, exec_args);
  st.stream.wait();
}

const char* last_matmul_impl() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.last_impl.c_str();
}

void clear_matmul_cache() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.cache.clear();
}

void forget_packed_operand(const void* b_cache_key) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  for (auto& kv : st.cache) kv.second->packed.erase(b_cache_key);
}

int64_t packed_operand_count() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  int64_t n = 0;
  for (auto& kv : st.cache) n += static_cast<int64_t>(kv.second->packed.size());
  return n;
}

int64_t cached_matmul_primitives() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  return static_cast<int64_t>(st.cache.size());
}

}  // namespace mantissa::kernels
