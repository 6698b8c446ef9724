// oneDNN matmul wrapper: one CPU engine and stream, primitives cached per
// (shape, types, transposes, alpha == 1 or not, accumulate, bias, packed-B,
// threads), constant B operands reordered once into the primitive's preferred
// (blocked) layout and kept until their version changes.
//
// alpha is a runtime argument, not part of the primitive: FP8 recipes with
// per-tensor scales change alpha every step and would otherwise create (JIT)
// new primitives during training. How it is applied is chosen per primitive,
// the first of these whose implementation is not oneDNN's reference one
// (AlphaMode, in order):
//   post_op       a binary-multiply post-op by a scalar memory passed per call:
//                 what oneDNN 2.6's brgemm (AVX-512, AMX) matmul takes; it
//                 rejects runtime output scales and falls back to gemm:jit,
//                 several times slower in bf16;
//   output_scale  a DNNL_RUNTIME_F32_VAL output scale: what gemm:jit (AVX2,
//                 where there is no brgemm matmul) takes; with a scalar
//                 binary post-op and a sum it would run ref:any, 1000x slower;
//   separate      the unscaled product into a per-thread buffer, then
//                 C = alpha * P (+ C) (+ bias) in one pass: the same
//                 operations in the same order as the post-op chain.
// A primitive whose implementation is still "ref:" is refused with an error
// naming its shape (kernels never run oneDNN's reference matmul).
// alpha == 1 keeps a primitive without scaling (the bias then goes in as
// oneDNN's bias).
//
// The per-call cost is kept near raw oneDNN's: each thread keeps its own view of
// a cached primitive with memory objects made once (only their data handles
// change per call) and executes through the C API with a fixed argument array,
// so a steady-state call takes no lock (unless B is packed), allocates nothing
// and builds no argument map.
//
// bf16-valued products take the route of matmul_route.hpp: oneDNN's bf16
// primitive, or (f32_widened) oneDNN's fp32 primitive over operands widened
// exactly to fp32 in per-thread buffers; a constant B is widened only when its
// packed copy is made, so a weight costs one widening per version. fp16
// operands take the fp32 primitive the same way (every fp16 value and every
// product of two is exact in fp32), next to fp32 operands as they are.
#include "mantissa/kernels/matmul.hpp"

#include <omp.h>

#include <atomic>
#include <cstring>
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "mantissa/tensor/derived_cache.hpp"
#include "mantissa/formats/bf16.hpp"
#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "kernels/parallel.hpp"
#include "mantissa/kernels/matmul_route.hpp"
#include "mantissa/cpu/profile.hpp"

namespace mantissa::kernels {
namespace {

using dnnl::memory;

struct Key {
  int64_t batch, M, N, K;
  int64_t a_stride, b_stride, c_stride;  // batch strides (elements)
  bool trans_a, trans_b, accumulate, has_bias, packed_b;
  bool bf16;    // both operands bf16 (else both f32)
  bool widened; // f32 primitive over bf16-valued operands (its packed B copies hold those values)
  bool f16;     // f32 primitive over widened fp16 operands (and fp32 ones as they are)
  bool scaled;  // alpha != 1: applied as the entry's AlphaMode, value passed per call
  AlphaMode forced;  // none, or the one mode a test forces (force_alpha_mode)
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
    mix(static_cast<uint64_t>(k.a_stride) ^ (static_cast<uint64_t>(k.b_stride) << 21) ^
        (static_cast<uint64_t>(k.c_stride) << 42));
    mix((k.trans_a ? 1u : 0u) | (k.trans_b ? 2u : 0u) | (k.accumulate ? 4u : 0u) | (k.has_bias ? 8u : 0u) |
        (k.packed_b ? 16u : 0u) | (k.bf16 ? 32u : 0u) | (k.scaled ? 64u : 0u) | (k.widened ? 128u : 0u) |
        (static_cast<uint64_t>(k.threads) << 8));
    mix(static_cast<uint64_t>(k.forced) | (k.f16 ? 256u : 0u));
    return static_cast<size_t>(h);
  }
};

// A constant B pre-packed for one primitive: an entry of the derived-value
// cache keyed (b_cache_key, the primitive's Entry, kPacked), so it goes when
// B's source dies or the primitive does.
struct Packed {
  memory mem;
};
const DerivedCache::Kind kPacked{"packed matmul operand"};

struct Entry {
  AlphaMode alpha_mode = AlphaMode::none;
  dnnl::matmul::primitive_desc pd;
  int64_t c_dense = 0;  // with AlphaMode::separate: elements of the unscaled product buffer
  dnnl::matmul prim;
  memory::desc a_md, b_plain_md, c_md, bias_md, alpha_md;
  bool b_needs_reorder = false;
  int alpha_post_op_index = 0;  // with Key::scaled: binary_mul by the scalar alpha
  bool bias_post_op = false;  // bias via binary post-op at this index
  int bias_post_op_index = 0;
  const char* impl = "none";  // interned in State::impl_names
  Entry() = default;
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;
  ~Entry() { derived_cache().forget_owner(this); }  // its packed copies of B
};

struct State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mu;
  std::unordered_map<Key, std::shared_ptr<Entry>, KeyHash> cache;
  std::set<std::string> impl_names;  // never shrinks: last_impl may point into it
  std::atomic<const char*> last_impl{"none"};
  std::atomic<uint64_t> generation{1};  // bumped by clear_matmul_cache: threads drop their views
  std::atomic<int64_t> created{0};
  std::atomic<AlphaMode> forced{AlphaMode::none};
  std::atomic<AlphaMode> last_mode{AlphaMode::none};
};

State& state() {
  static State s;
  return s;
}

memory::dims dims_of(int64_t batch, int64_t rows, int64_t cols) {
  if (batch == 1) return {rows, cols};
  return {batch, rows, cols};
}

// Row-major [rows, cols] per batch, or its transpose stored [cols, rows];
// batch_stride elements between batch matrices.
memory::desc plain_md(int64_t batch, int64_t rows, int64_t cols, memory::data_type dt,
                      bool transposed, int64_t batch_stride) {
  memory::dims strides = transposed ? memory::dims{1, rows} : memory::dims{cols, 1};
  if (batch != 1) strides.insert(strides.begin(), batch_stride);
  return memory::desc(dims_of(batch, rows, cols), dt, strides);
}

bool is_reference(const dnnl::matmul::primitive_desc& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

std::string shape_text(const Key& k) {
  return "batch=" + std::to_string(k.batch) + " M=" + std::to_string(k.M) + " N=" + std::to_string(k.N) +
         " K=" + std::to_string(k.K) + (k.bf16 ? " bf16" : " f32") + (k.trans_a ? " trans_a" : "") +
         (k.trans_b ? " trans_b" : "") + (k.scaled ? " scaled" : "") + (k.accumulate ? " accumulate" : "") +
         (k.has_bias ? " bias" : "");
}

// The primitive for key k with alpha applied as `mode` (none: k is unscaled,
// or the separate pass applies alpha, the sum and the bias). Post-ops run in
// order on the fp32 accumulator: alpha AB, then (+ C), then (+ bias). oneDNN's
// own bias is added before any post-op and inside an output scale (it would be
// scaled too), so a scaled product gets its bias from a binary post-op.
// Throws dnnl::error when oneDNN has no implementation at all.
void build_primitive(const Key& k, AlphaMode mode, State& st, Entry& e) {
  const auto dt = k.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  e.alpha_mode = mode;
  e.a_md = plain_md(k.batch, k.M, k.K, dt, k.trans_a, k.a_stride);
  e.b_plain_md = plain_md(k.batch, k.K, k.N, dt, k.trans_b, k.b_stride);
  const bool separate = mode == AlphaMode::separate;
  e.c_dense = separate ? k.batch * k.M * k.N : 0;
  e.c_md = plain_md(k.batch, k.M, k.N, memory::data_type::f32, false, separate ? k.M * k.N : k.c_stride);
  memory::desc b_md = e.b_plain_md;
  if (k.packed_b) b_md = memory::desc(dims_of(k.batch, k.K, k.N), dt, memory::format_tag::any);
  dnnl::primitive_attr attr;
  const bool bias = k.has_bias && !separate;
  if (k.has_bias) {  // [N] broadcast over rows (and batch)
    e.bias_md = k.batch == 1 ? memory::desc({1, k.N}, memory::data_type::f32, memory::dims{k.N, 1})
                             : memory::desc({1, 1, k.N}, memory::data_type::f32, memory::dims{k.N, k.N, 1});
  }
  e.bias_post_op = bias && k.scaled;
  dnnl::post_ops ops;
  if (mode == AlphaMode::post_op) {
    e.alpha_md = k.batch == 1 ? memory::desc({1, 1}, memory::data_type::f32, memory::dims{1, 1})
                              : memory::desc({1, 1, 1}, memory::data_type::f32, memory::dims{1, 1, 1});
    e.alpha_post_op_index = ops.len();
    ops.append_binary(dnnl::algorithm::binary_mul, e.alpha_md);
  } else if (mode == AlphaMode::output_scale) {
    attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
    e.alpha_md = memory::desc({1}, memory::data_type::f32, memory::dims{1});
  }
  if (k.accumulate && !separate) ops.append_sum(1.0f);
  if (e.bias_post_op) {
    e.bias_post_op_index = ops.len();
    ops.append_binary(dnnl::algorithm::binary_add, e.bias_md);
  }
  if (ops.len() > 0) attr.set_post_ops(ops);
  auto desc = bias && !e.bias_post_op ? dnnl::matmul::desc(e.a_md, b_md, e.bias_md, e.c_md)
                                      : dnnl::matmul::desc(e.a_md, b_md, e.c_md);
  e.pd = dnnl::matmul::primitive_desc(desc, attr, st.engine);
}

// Called with State::mu held.
std::shared_ptr<Entry> make_entry(const Key& k, State& st) {
  auto e = std::make_shared<Entry>();
  bool found = false;
  std::vector<AlphaMode> modes = {AlphaMode::none};
  if (k.scaled) modes = {AlphaMode::post_op, AlphaMode::output_scale, AlphaMode::separate};
  if (k.scaled && k.forced != AlphaMode::none) modes = {k.forced};
  for (AlphaMode mode : modes) {
    try {
      build_primitive(k, mode, st, *e);
    } catch (const dnnl::error&) {
      continue;  // no implementation of this form: try the next
    }
    if (!is_reference(e->pd)) {
      found = true;
      break;
    }
  }
  if (!found) {
    throw std::runtime_error("matmul: oneDNN has no implementation but its reference one for " + shape_text(k) +
                             " on this CPU (oneDNN ISA " + matmul_isa_name() + ")");
  }
  e->prim = dnnl::matmul(e->pd);
  e->b_needs_reorder = k.packed_b && e->pd.weights_desc() != e->b_plain_md;
  const std::string impl =
      (k.widened ? "f32_widened:" : k.f16 ? "f16_widened:" : "") + std::string(e->pd.impl_info_str());
  e->impl = st.impl_names.insert(impl).first->c_str();
  st.created.fetch_add(1, std::memory_order_relaxed);
  return e;
}

// A thread's view of a cached primitive: memory objects made once whose data
// handles are swapped per call (oneDNN memory objects must not be shared by
// threads executing concurrently, primitives may).
struct View {
  std::shared_ptr<Entry> e;
  memory a, b_plain, c, bias, scale;
  float alpha = 1.0f;  // the scale memory points here (unordered_map nodes do not move)
};

struct ThreadViews {
  uint64_t generation = 0;
  std::unordered_map<Key, View, KeyHash> views;
};

View& view_for(const Key& key, State& st) {
  thread_local ThreadViews t;
  const uint64_t gen = st.generation.load(std::memory_order_acquire);
  if (t.generation != gen) {
    t.views.clear();
    t.generation = gen;
  }
  View& v = t.views[key];
  if (v.e) return v;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.cache.find(key);
    if (it == st.cache.end()) it = st.cache.emplace(key, make_entry(key, st)).first;
    v.e = it->second;
  }
  const Entry& e = *v.e;
  v.a = memory(e.a_md, st.engine, nullptr);
  v.b_plain = memory(e.b_plain_md, st.engine, nullptr);
  v.c = memory(e.c_md, st.engine, nullptr);
  if (key.has_bias) v.bias = memory(e.bias_md, st.engine, nullptr);
  if (e.alpha_mode == AlphaMode::post_op || e.alpha_mode == AlphaMode::output_scale)
    v.scale = memory(e.alpha_md, st.engine, &v.alpha);
  return v;
}

void check_args(const MatmulArgs& a) {
  if (a.batch < 1 || a.M < 0 || a.N < 0 || a.K < 0) {
    throw std::invalid_argument("matmul: bad shape batch=" + std::to_string(a.batch) +
                                " M=" + std::to_string(a.M) + " N=" + std::to_string(a.N) +
                                " K=" + std::to_string(a.K));
  }
  for (DType t : {a.a_type, a.b_type}) {
    if (t != DType::f32 && t != DType::bf16 && t != DType::f16) {
      throw std::invalid_argument(std::string("matmul: operand dtype ") + dtype_name(t) +
                                  " unsupported (widen FP8 to bf16 or f32 first)");
    }
  }
  if ((a.a_type == DType::f16 && a.b_type == DType::bf16) || (a.a_type == DType::bf16 && a.b_type == DType::f16))
    throw std::invalid_argument("matmul: fp16 x bf16 operands have no common product type (widen one to f32 first)");
  const struct {
    const char* name;
    int64_t stride, dense;
  } strides[] = {{"a", a.a_batch_stride, a.M * a.K}, {"b", a.b_batch_stride, a.K * a.N}, {"c", a.c_batch_stride, a.M * a.N}};
  for (const auto& s : strides) {
    if (s.stride != 0 && s.stride < s.dense) {
      throw std::invalid_argument(std::string("matmul: ") + s.name + "_batch_stride " + std::to_string(s.stride) +
                                  " is smaller than one matrix (" + std::to_string(s.dense) + " elements)");
    }
  }
  const bool strided = a.a_batch_stride != 0 || a.b_batch_stride != 0;
  if (strided && a.a_type != a.b_type) {
    throw std::invalid_argument("matmul: strided operands must share one type (no f32 -> bf16 widening of a strided batch)");
  }
}

int64_t stride_or_dense(int64_t stride, int64_t rows, int64_t cols) { return stride != 0 ? stride : rows * cols; }

// Elements a [batch, rows, cols] operand spans from its first element.
int64_t span_of(int64_t batch, int64_t stride, int64_t rows, int64_t cols) {
  return (batch - 1) * stride_or_dense(stride, rows, cols) + rows * cols;
}

// out [n] = in as fp32: fp16 and bf16 codes widen exactly; fp32 values are
// rounded to nearest-even bf16 first (as the bf16 route does).
void widen_operand(float* out, const void* in, DType type, int64_t n) {
  if (type == DType::f16) {
    static const formats::Format& fp16 = formats::preset("fp16");
    const uint16_t* src = static_cast<const uint16_t*>(in);
    for_chunks(n, [&](int64_t b, int64_t e) { formats::dequantize(fp16, src + b, out + b, static_cast<size_t>(e - b)); });
  } else if (type == DType::bf16) {
    const uint16_t* src = static_cast<const uint16_t*>(in);
    for_chunks(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = formats::widen_bf16(src[i]);
    });
  } else {
    const float* src = static_cast<const float*>(in);
    for_chunks(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = formats::widen_bf16(formats::round_bf16(src[i]));
    });
  }
}

// K == 0: the product is empty, C = (accumulate ? C : 0) + bias.
void empty_product(const MatmulArgs& a, float* C, const float* bias) {
  const int64_t c_stride = stride_or_dense(a.c_batch_stride, a.M, a.N);
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t r = 0; r < a.M; ++r) {
      float* row = C + b * c_stride + r * a.N;
      for (int64_t j = 0; j < a.N; ++j) row[j] = (a.accumulate ? row[j] : 0.0f) + (bias ? bias[j] : 0.0f);
    }
  }
}

// C = alpha * P (+ C) (+ bias), P dense [batch, M, N]: the post-op chain's
// operations in its order, for AlphaMode::separate.
void scale_into(const MatmulArgs& a, const float* P, float* C, const float* bias) {
  const int64_t c_stride = stride_or_dense(a.c_batch_stride, a.M, a.N);
  const float alpha = a.alpha;
  const bool acc = a.accumulate;
  for_chunks(a.batch * a.M, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const float* p = P + row * a.N;
      float* c = C + (row / a.M) * c_stride + (row % a.M) * a.N;
      for (int64_t j = 0; j < a.N; ++j) {
        float v = alpha * p[j];
        if (acc) v += c[j];
        if (bias) v += bias[j];
        c[j] = v;
      }
    }
  });
}

AlphaMode st_forced() { return state().forced.load(std::memory_order_relaxed); }

}  // namespace

void force_alpha_mode(AlphaMode mode) { state().forced.store(mode, std::memory_order_relaxed); }

AlphaMode last_matmul_alpha_mode() { return state().last_mode.load(std::memory_order_relaxed); }

const char* alpha_mode_name(AlphaMode mode) {
  switch (mode) {
    case AlphaMode::none: return "none";
    case AlphaMode::post_op: return "post_op";
    case AlphaMode::output_scale: return "output_scale";
    case AlphaMode::separate: return "separate";
  }
  return "unknown";
}

void matmul(const MatmulArgs& args, const void* A, const void* B, float* C, const float* bias) {
  cpu::profile::Scope profile_scope(cpu::profile::Category::matmul, 2.0 * static_cast<double>(args.batch) * static_cast<double>(args.M) * static_cast<double>(args.N) * static_cast<double>(args.K));
  check_args(args);
  if (args.M == 0 || args.N == 0) return;
  if (args.K == 0) return empty_product(args, C, bias);

  // Mixed f32/bf16 operands run as bf16 x bf16: the f32 one is rounded to
  // nearest-even bf16 (oneDNN has no mixed-type matmul). Off AMX the bf16
  // values go to the fp32 primitive instead (matmul_route.hpp).
  const bool bf16_values = args.a_type == DType::bf16 || args.b_type == DType::bf16;
  const bool widened = bf16_values && bf16_route() == Bf16Route::f32_widened;
  const bool bf16 = bf16_values && !widened;
  const bool f16 = args.a_type == DType::f16 || args.b_type == DType::f16;
  if (std::string why; bf16 && !route_available(Bf16Route::onednn_bf16, &why)) {
    throw std::invalid_argument("matmul: the bf16 route onednn_bf16 (MANTISSA_BF16_MATMUL or set_bf16_route) "
                                "cannot run on this CPU: " + why + "; use auto or f32_widened");
  }
  thread_local std::vector<uint16_t> a_tmp, b_tmp;
  thread_local std::vector<float> a_wide, b_wide;
  if (widened || (f16 && args.a_type == DType::f16)) {
    const int64_t n = span_of(args.batch, args.a_batch_stride, args.M, args.K);
    a_wide.resize(static_cast<size_t>(n));
    widen_operand(a_wide.data(), A, args.a_type, n);
    A = a_wide.data();
  } else if (bf16 && args.a_type == DType::f32) {
    const int64_t n = args.batch * args.M * args.K;
    a_tmp.resize(static_cast<size_t>(n));
    f32_to_bf16(a_tmp.data(), static_cast<const float*>(A), n);
    A = a_tmp.data();
  }
  // B is converted lazily: a packed constant B whose version is unchanged
  // needs no conversion at all.
  auto b_operand = [&]() -> void* {
    if (widened || (f16 && args.b_type == DType::f16)) {
      const int64_t n = span_of(args.batch, args.b_batch_stride, args.K, args.N);
      b_wide.resize(static_cast<size_t>(n));
      widen_operand(b_wide.data(), B, args.b_type, n);
      return b_wide.data();
    }
    if (!(bf16 && args.b_type == DType::f32)) return const_cast<void*>(B);
    const int64_t n = args.batch * args.K * args.N;
    b_tmp.resize(static_cast<size_t>(n));
    f32_to_bf16(b_tmp.data(), static_cast<const float*>(B), n);
    return b_tmp.data();
  };

  const bool packed = args.b_is_constant && args.b_cache_key != nullptr;
  const Key key{args.batch,     args.M,          args.N,          args.K,
                stride_or_dense(args.a_batch_stride, args.M, args.K),
                stride_or_dense(args.b_batch_stride, args.K, args.N),
                stride_or_dense(args.c_batch_stride, args.M, args.N),
                args.trans_a,
                args.trans_b,   args.accumulate, bias != nullptr, packed,       bf16,
                widened,        f16,               args.alpha != 1.0f,
                args.alpha != 1.0f ? st_forced() : AlphaMode::none,
                omp_get_max_threads()};

  State& st = state();
  View& v = view_for(key, st);
  Entry& e = *v.e;
  st.last_impl.store(e.impl, std::memory_order_relaxed);
  st.last_mode.store(e.alpha_mode, std::memory_order_relaxed);
  const bool separate = e.alpha_mode == AlphaMode::separate;
  thread_local std::vector<float> product;  // AlphaMode::separate: the unscaled product
  if (separate) product.resize(static_cast<size_t>(e.c_dense));
  memory b_packed;  // holds the packed copy alive through the call
  dnnl_memory_t b_handle;
  if (e.b_needs_reorder) {
    std::lock_guard<std::mutex> lock(st.mu);
    auto& slot = derived_cache().slot<Packed>(args.b_cache_key, &e, kPacked);
    Packed& p = slot.value;
    if (!p.mem || slot.version != args.b_cache_version) {
      memory src(e.b_plain_md, st.engine, b_operand());
      if (!p.mem) p.mem = memory(e.pd.weights_desc(), st.engine);
      dnnl::reorder(src, p.mem).execute(st.stream, src, p.mem);
      st.stream.wait();
      slot.version = args.b_cache_version;
    }
    b_packed = p.mem;
    b_handle = b_packed.get();
  } else {
    v.b_plain.set_data_handle(b_operand());
    b_handle = v.b_plain.get();
  }
  v.a.set_data_handle(const_cast<void*>(A));
  v.c.set_data_handle(separate ? product.data() : C);
  dnnl_exec_arg_t exec_args[5] = {{DNNL_ARG_SRC, v.a.get()}, {DNNL_ARG_WEIGHTS, b_handle}, {DNNL_ARG_DST, v.c.get()}};
  int n_args = 3;
  if (bias && !separate) {
    v.bias.set_data_handle(const_cast<float*>(bias));
    const int slot = e.bias_post_op
                         ? (DNNL_ARG_ATTR_MULTIPLE_POST_OP(e.bias_post_op_index) | DNNL_ARG_SRC_1)
                         : DNNL_ARG_BIAS;
    exec_args[n_args++] = {slot, v.bias.get()};
  }
  v.alpha = args.alpha;
  if (e.alpha_mode == AlphaMode::post_op) {
    exec_args[n_args++] = {DNNL_ARG_ATTR_MULTIPLE_POST_OP(e.alpha_post_op_index) | DNNL_ARG_SRC_1, v.scale.get()};
  } else if (e.alpha_mode == AlphaMode::output_scale) {
    exec_args[n_args++] = {DNNL_ARG_ATTR_OUTPUT_SCALES, v.scale.get()};
  }
  const dnnl_status_t status = dnnl_primitive_execute(e.prim.get(), st.stream.get(), n_args, exec_args);
  if (status != dnnl_success) {
    throw std::runtime_error("matmul: oneDNN execution failed (status " + std::to_string(static_cast<int>(status)) +
                             ") for M=" + std::to_string(args.M) + " N=" + std::to_string(args.N) +
                             " K=" + std::to_string(args.K));
  }
  st.stream.wait();
  if (separate) scale_into(args, product.data(), C, bias);
}

const char* last_matmul_impl() { return state().last_impl.load(std::memory_order_relaxed); }

void clear_matmul_cache() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.cache.clear();
  st.generation.fetch_add(1, std::memory_order_release);
}

int64_t matmul_primitives_created() { return state().created.load(std::memory_order_relaxed); }

void forget_packed_operand(const void* b_cache_key) { derived_cache().forget_source(b_cache_key); }

int64_t packed_operand_count() { return derived_cache().count(kPacked); }

int64_t cached_matmul_primitives() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  return static_cast<int64_t>(st.cache.size());
}

}  // namespace mantissa::kernels
