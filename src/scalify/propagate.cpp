// Scale-propagation rules of Scalify (Balança et al. 2024: linear ops, selection, layout
// including the sum of embedding tables, elementwise math) and the dispatcher by op name.
#include "mantissa/scalify/propagate.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

#include "scalify/propagate_detail.hpp"

namespace mantissa::scalify {

namespace detail {

std::vector<float> data_of(const ScaledTensor& x) {
  Tensor plain = x.data;
  plain.set_scale(1.0f);
  return plain.to_vector();
}

void need_tensor_scale(const ScaledTensor& x, std::string_view op) {
  x.validate("scale propagation (" + std::string(op) + ")");
  if (x.granularity != Granularity::tensor)
    throw std::invalid_argument("scale propagation: op '" + std::string(op) +
                                "' takes per-tensor scales (got a per-row/per-block tensor)");
}

// "Any scale": all data zero, or some data not finite.
bool any_scale(const std::vector<float>& d) {
  bool zero = true;
  for (float v : d) {
    if (!std::isfinite(v)) return true;
    zero = zero && v == 0.0f;
  }
  return zero;
}

ScaledTensor make(std::vector<float> data, const Shape& shape, float scale) {
  ScaledTensor out;
  out.data = Tensor::from(data, shape);
  out.scales = {scale};
  return out;
}

}  // namespace detail

float scale_rule::sqrt_fan(int64_t K, Pow2Rounder& r) { return r(std::sqrt(static_cast<double>(K))); }

double scale_rule::add(double a, double b, Pow2Rounder& r) {
  if (a == 0) return b;
  if (b == 0) return a;
  return r(std::sqrt(a * a + b * b));
}

double scale_rule::embedding_sum(std::span<const double> tables, Pow2Rounder& r) {
  double ss = 0, only = 0;
  int nonzero = 0;
  for (const double s : tables)
    if (s != 0) ss += s * s, only = s, ++nonzero;
  if (nonzero <= 1) return only;  // one table, or none: its scale, unrounded
  return r(std::sqrt(ss));
}

using detail::any_scale;
using detail::data_of;
using detail::make;
using detail::need_shape;
using detail::need_tensor_scale;

namespace {

void same_shape(const ScaledTensor& a, const ScaledTensor& b, std::string_view op) {
  if (a.shape() != b.shape())
    throw std::invalid_argument("scale propagation: op '" + std::string(op) + "' needs equal shapes, got " +
                                shape_str(a.shape()) + " and " + shape_str(b.shape()));
}

// The add rule for c = ka a + kb b (ka, kb = +-1), bias broadcast when b is [C].
ScaledTensor add_rule(const ScaledTensor& a, const ScaledTensor& b, float kb, Pow2Rounder& r, std::string_view op) {
  need_tensor_scale(a, op);
  need_tensor_scale(b, op);
  const auto da = data_of(a), db = data_of(b);
  const double sa = a.scale(), sb = b.scale();
  const auto zs = static_cast<float>(any_scale(da) ? sb : scale_rule::add(sa, any_scale(db) ? 0.0 : sb, r));
  const float fa = static_cast<float>(sa / zs), fb = static_cast<float>(kb * sb / zs);  // powers of two: exact
  std::vector<float> out(da.size());
  const size_t nb = db.size();
  for (size_t i = 0; i < da.size(); ++i) out[i] = da[i] * fa + db[i % nb] * fb;
  return make(std::move(out), a.shape(), zs);
}

// Largest scale among operands that are not "any scale" (1 if all are).
float largest_scale(std::span<const ScaledTensor* const> xs, std::string_view op) {
  float s = 0;
  for (const ScaledTensor* x : xs) {
    need_tensor_scale(*x, op);
    if (!any_scale(data_of(*x))) s = std::max(s, x->scale());
  }
  if (s == 0)
    for (const ScaledTensor* x : xs) s = std::max(s, x->scale());
  return s;
}

template <class F>
ScaledTensor binary_select(const ScaledTensor& a, const ScaledTensor& b, std::string_view op, F f) {
  same_shape(a, b, op);
  const ScaledTensor* both[] = {&a, &b};
  const float s = largest_scale(both, op);
  const auto va = a.values(), vb = b.values();
  std::vector<float> out(va.size());
  for (size_t i = 0; i < va.size(); ++i) out[i] = f(i, va[i], vb[i]) / s;
  return make(std::move(out), a.shape(), s);
}

}  // namespace

ScaledTensor add(const ScaledTensor& a, const ScaledTensor& b, Pow2Rounder& r) {
  same_shape(a, b, "add");
  return add_rule(a, b, 1.0f, r, "add");
}

ScaledTensor sub(const ScaledTensor& a, const ScaledTensor& b, Pow2Rounder& r) {
  same_shape(a, b, "sub");
  return add_rule(a, b, -1.0f, r, "sub");
}

ScaledTensor add_bias(const ScaledTensor& x, const ScaledTensor& bias, Pow2Rounder& r) {
  if (bias.data.ndim() != 1 || bias.numel() != x.cols())
    throw std::invalid_argument("scale propagation: add_bias needs a bias of " + std::to_string(x.cols()) +
                                " elements, got " + shape_str(bias.shape()));
  return add_rule(x, bias, 1.0f, r, "add_bias");
}

ScaledTensor mul(const ScaledTensor& a, const ScaledTensor& b) {
  same_shape(a, b, "mul");
  need_tensor_scale(a, "mul");
  need_tensor_scale(b, "mul");
  auto d = data_of(a);
  const auto db = data_of(b);
  for (size_t i = 0; i < d.size(); ++i) d[i] *= db[i];
  return make(std::move(d), a.shape(), a.scale() * b.scale());
}

ScaledTensor div(const ScaledTensor& a, const ScaledTensor& b) {
  same_shape(a, b, "div");
  need_tensor_scale(a, "div");
  need_tensor_scale(b, "div");
  auto d = data_of(a);
  const auto db = data_of(b);
  for (size_t i = 0; i < d.size(); ++i) d[i] /= db[i];
  return make(std::move(d), a.shape(), a.scale() / b.scale());
}

ScaledTensor matmul(const ScaledTensor& a, const ScaledTensor& b, Pow2Rounder& r) {
  need_tensor_scale(a, "matmul");
  need_tensor_scale(b, "matmul");
  if (a.data.ndim() != 2 || b.data.ndim() != 2 || a.data.dim(1) != b.data.dim(0))
    throw std::invalid_argument("scale propagation: matmul needs [M, K] @ [K, N], got " + shape_str(a.shape()) +
                                " @ " + shape_str(b.shape()));
  const int64_t M = a.data.dim(0), K = a.data.dim(1), N = b.data.dim(1);
  const float rk = scale_rule::sqrt_fan(K, r);
  const auto da = data_of(a), db = data_of(b);
  std::vector<float> out(static_cast<size_t>(M * N), 0.0f);
  const float inv = 1.0f / rk;
#pragma omp parallel for schedule(static) if (M * N * K > (1 << 18))
  for (int64_t i = 0; i < M; ++i) {
    float* row = out.data() + i * N;
    for (int64_t k = 0; k < K; ++k) {
      const float aik = da[static_cast<size_t>(i * K + k)];
      const float* brow = db.data() + k * N;
      for (int64_t j = 0; j < N; ++j) row[j] += aik * brow[j];
    }
    for (int64_t j = 0; j < N; ++j) row[j] *= inv;
  }
  return make(std::move(out), {M, N}, static_cast<float>(scale_rule::matmul(a.scale(), b.scale(), rk)));
}

ScaledTensor reduce_sum(const ScaledTensor& x, Pow2Rounder& r) {
  need_tensor_scale(x, "reduce_sum");
  const int64_t C = x.cols(), R = x.rows();
  const float rn = r(std::sqrt(static_cast<double>(std::max<int64_t>(C, 1))));
  const auto d = data_of(x);
  std::vector<float> out(static_cast<size_t>(R));
  for (int64_t i = 0; i < R; ++i) {
    double s = 0;
    for (int64_t j = 0; j < C; ++j) s += d[static_cast<size_t>(i * C + j)];
    out[static_cast<size_t>(i)] = static_cast<float>(s / rn);
  }
  Shape shape = x.shape();
  if (!shape.empty()) shape.pop_back();
  if (shape.empty()) shape = {1};
  return make(std::move(out), shape, x.scale() * rn);
}

ScaledTensor maximum(const ScaledTensor& a, const ScaledTensor& b) {
  return binary_select(a, b, "max", [](size_t, float x, float y) { return std::max(x, y); });
}

ScaledTensor minimum(const ScaledTensor& a, const ScaledTensor& b) {
  return binary_select(a, b, "min", [](size_t, float x, float y) { return std::min(x, y); });
}

ScaledTensor select(const Tensor& cond, const ScaledTensor& a, const ScaledTensor& b) {
  if (cond.shape() != a.shape())
    throw std::invalid_argument("scale propagation: select's condition is " + shape_str(cond.shape()) + ", not " +
                                shape_str(a.shape()));
  const auto c = cond.to_vector();
  return binary_select(a, b, "select", [&](size_t i, float x, float y) { return c[i] != 0.0f ? x : y; });
}

ScaledTensor concat(std::span<const ScaledTensor> xs) {
  if (xs.empty()) throw std::invalid_argument("scale propagation: concat of nothing");
  std::vector<const ScaledTensor*> ptrs;
  int64_t cols = 0;
  for (const auto& x : xs) {
    if (x.rows() != xs[0].rows()) throw std::invalid_argument("scale propagation: concat needs equal leading dims");
    ptrs.push_back(&x);
    cols += x.cols();
  }
  const float s = largest_scale(ptrs, "concat");
  const int64_t R = xs[0].rows();
  std::vector<float> out(static_cast<size_t>(R * cols));
  int64_t at = 0;
  for (const auto& x : xs) {
    const auto v = x.values();
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < x.cols(); ++j) out[static_cast<size_t>(i * cols + at + j)] = v[static_cast<size_t>(i * x.cols() + j)] / s;
    at += x.cols();
  }
  Shape shape = xs[0].shape();
  shape.back() = cols;
  return make(std::move(out), shape, s);
}

ScaledTensor reshape(const ScaledTensor& x, const Shape& shape) {
  ScaledTensor out = x;
  out.data = x.data.view(shape);
  return out;
}

ScaledTensor transpose(const ScaledTensor& x) {
  need_tensor_scale(x, "transpose");
  const int64_t R = x.rows(), C = x.cols();
  const auto d = data_of(x);
  std::vector<float> out(d.size());
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) out[static_cast<size_t>(j * R + i)] = d[static_cast<size_t>(i * C + j)];
  return make(std::move(out), {C, R}, x.scale());
}

ScaledTensor slice_rows(const ScaledTensor& x, int64_t begin, int64_t end) {
  need_tensor_scale(x, "slice");
  ScaledTensor out = x;
  out.data = x.data.slice0(begin, end);
  return out;
}

ScaledTensor embedding(const Tensor& ids, const ScaledTensor& weight) {
  need_tensor_scale(weight, "embedding");
  const int64_t V = weight.data.dim(0), C = weight.cols();
  const auto w = data_of(weight);
  std::vector<float> out(static_cast<size_t>(ids.numel() * C));
  for (int64_t n = 0; n < ids.numel(); ++n) {
    const int32_t id = ids.data<int32_t>()[n];
    if (id < 0 || id >= V)
      throw std::invalid_argument("scale propagation: embedding id " + std::to_string(id) + " outside [0, " +
                                  std::to_string(V) + ")");
    std::copy_n(w.data() + static_cast<size_t>(id) * static_cast<size_t>(C), C, out.data() + n * C);
  }
  Shape shape = ids.shape();
  shape.push_back(C);
  return make(std::move(out), shape, weight.scale());
}

ScaledTensor embedding_sum(std::span<const Tensor> ids, std::span<const ScaledTensor> tables, Pow2Rounder& r) {
  need_shape(!tables.empty() && ids.size() == tables.size(), "embedding_sum", "needs one id tensor per table");
  const int64_t N = ids[0].numel(), C = tables[0].cols();
  std::vector<double> scales;
  std::vector<std::vector<float>> data;
  for (size_t i = 0; i < tables.size(); ++i) {
    need_tensor_scale(tables[i], "embedding_sum");
    need_shape(ids[i].dtype() == DType::i32 && ids[i].numel() == N && tables[i].data.ndim() == 2 && tables[i].cols() == C,
         "embedding_sum", "needs i32 ids [N] and tables [V, C] of one width");
    const std::vector<float>& d = data.emplace_back(data_of(tables[i]));
    const bool zero = std::all_of(d.begin(), d.end(), [](float v) { return v == 0.0f; });
    scales.push_back(zero ? 0.0 : static_cast<double>(tables[i].scale()));
  }
  double zs = scale_rule::embedding_sum(scales, r);
  if (zs == 0) zs = 1;  // every table zero: any scale
  std::vector<double> acc(static_cast<size_t>(N * C), 0.0);
  for (size_t i = 0; i < tables.size(); ++i) {
    const std::vector<float>& d = data[i];
    const int64_t V = tables[i].data.dim(0);
    const double f = tables[i].scale() / zs;  // a power of two: exact
    for (int64_t n = 0; n < N; ++n) {
      const int32_t id = ids[i].data<int32_t>()[n];
      need_shape(id >= 0 && id < V, "embedding_sum", "got id " + std::to_string(id) + " outside [0, " + std::to_string(V) + ")");
      for (int64_t c = 0; c < C; ++c) acc[static_cast<size_t>(n * C + c)] += d[static_cast<size_t>(id * C + c)] * f;
    }
  }
  std::vector<float> out(acc.begin(), acc.end());
  return make(std::move(out), {N, C}, static_cast<float>(zs));
}

ScaledTensor exp(const ScaledTensor& x) {
  need_tensor_scale(x, "exp");
  auto v = x.values();
  for (float& e : v) e = std::exp(e);
  return make(std::move(v), x.shape(), 1.0f);
}

ScaledTensor log(const ScaledTensor& x) {
  need_tensor_scale(x, "log");
  auto d = data_of(x);
  const float ls = std::log(x.scale());
  for (float& e : d) e = std::log(e) + ls;
  return make(std::move(d), x.shape(), 1.0f);
}

ScaledTensor sqrt(const ScaledTensor& x) {
  need_tensor_scale(x, "sqrt");
  int e = 0;
  std::frexp(x.scale(), &e);
  e -= 1;  // scale = 2^e
  const float into_data = (e % 2 != 0) ? 2.0f : 1.0f;
  auto d = data_of(x);
  for (float& v : d) v = std::sqrt(v * into_data);
  return make(std::move(d), x.shape(), std::ldexp(1.0f, (e - (e % 2 != 0 ? 1 : 0)) / 2));
}

ScaledTensor pow(const ScaledTensor& x, int y) {
  need_tensor_scale(x, "pow");
  auto d = data_of(x);
  for (float& v : d) v = static_cast<float>(std::pow(static_cast<double>(v), y));
  const double s = std::pow(static_cast<double>(x.scale()), y);
  if (!(s > 0) || !std::isfinite(s) || s < 0x1p-126 || s > 0x1p127)
    throw std::invalid_argument("scale propagation: pow's scale leaves the fp32 range");
  return make(std::move(d), x.shape(), static_cast<float>(s));
}

std::vector<std::string> ops_with_rules() {
  return {"add", "sub", "mul", "div", "matmul", "reduce_sum", "max", "min", "concat", "transpose",
          "exp", "log", "sqrt", "gelu", "silu", "swiglu", "softmax", "stop_scale"};
}

ScaledTensor apply(std::string_view op, std::span<const ScaledTensor> in, Pow2Rounder& r) {
  auto arity = [&](size_t n) {
    if (in.size() != n)
      throw std::invalid_argument("scale propagation: op '" + std::string(op) + "' takes " + std::to_string(n) +
                                  " inputs, got " + std::to_string(in.size()));
  };
  if (op == "add") return arity(2), add(in[0], in[1], r);
  if (op == "sub") return arity(2), sub(in[0], in[1], r);
  if (op == "mul") return arity(2), mul(in[0], in[1]);
  if (op == "div") return arity(2), div(in[0], in[1]);
  if (op == "matmul") return arity(2), matmul(in[0], in[1], r);
  if (op == "max") return arity(2), maximum(in[0], in[1]);
  if (op == "min") return arity(2), minimum(in[0], in[1]);
  if (op == "concat") return concat(in);
  if (op == "reduce_sum") return arity(1), reduce_sum(in[0], r);
  if (op == "transpose") return arity(1), transpose(in[0]);
  if (op == "exp") return arity(1), exp(in[0]);
  if (op == "log") return arity(1), log(in[0]);
  if (op == "sqrt") return arity(1), sqrt(in[0]);
  if (op == "gelu") return arity(1), gelu(in[0]);
  if (op == "silu") return arity(1), silu(in[0]);
  if (op == "swiglu") return arity(2), swiglu(in[0], in[1]);
  if (op == "softmax") return arity(1), softmax(in[0]);
  if (op == "stop_scale") return arity(1), stop_scale(in[0]);
  std::string names;
  for (const auto& n : ops_with_rules()) names += (names.empty() ? "" : ", ") + n;
  throw NoScaleRule("scale propagation: op '" + std::string(op) + "' has no rule for scaled inputs (ops with rules: " +
                    names + "; wrap the input in stop_scale to leave the scaled world explicitly)");
}

}  // namespace mantissa::scalify
