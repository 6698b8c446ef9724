#include "mantissa/tensor/tensor.hpp"

#include <cstring>
#include <sstream>
#include <stdexcept>

#include "mantissa/formats/convert.hpp"
#include "mantissa/cpu/profile.hpp"
#include "mantissa/tensor/checked.hpp"
#include "mantissa/tensor/memory_trace.hpp"

namespace mantissa {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: return 2;
    default: return 1;
  }
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::e4m3fn: return "e4m3fn";
    case DType::e5m2: return "e5m2";
    case DType::e4m3fnuz: return "e4m3fnuz";
    case DType::e5m2fnuz: return "e5m2fnuz";
    case DType::i32: return "i32";
  }
  return "?";
}

const char* dtype_format_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    case DType::i32: throw std::invalid_argument("i32 tensors have no floating format");
    default: return dtype_name(t);
  }
}

DType parse_dtype(const std::string& name) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::e4m3fn, DType::e5m2,
                  DType::e4m3fnuz, DType::e5m2fnuz, DType::i32}) {
    if (name == dtype_name(t) || (t != DType::i32 && name == dtype_format_name(t))) return t;
  }
  throw std::invalid_argument("unknown dtype '" + name +
                              "' (valid: f32, bf16, f16, e4m3fn, e5m2, e4m3fnuz, e5m2fnuz, i32)");
}

int64_t shape_numel(const Shape& s) { return checked_numel(s, "element count of a tensor shape"); }

size_t Tensor::bytes() const {
  return static_cast<size_t>(checked_mul(numel(), static_cast<int64_t>(dtype_size(dtype_)), "byte size of a tensor"));
}

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ']';
  return o.str();
}

Storage::Storage(size_t bytes, MemoryKind kind) : bytes_(bytes), kind_(kind) {
  data_ = tracked_alloc(bytes, kind);
}
Storage::~Storage() { tracked_free(data_, bytes_, kind_); }

Tensor Tensor::empty(const Shape& shape, DType dtype, MemoryKind kind) {
  for (int64_t d : shape)
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.bytes(), kind);
  if (memory_trace_on()) detail::trace_note(t.raw(), std::string(dtype_name(dtype)) + " " + shape_str(shape));
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemoryKind kind) {
  Tensor t = empty(shape, dtype, kind);
  t.zero_();
  return t;
}

Tensor Tensor::from(const std::vector<float>& values, const Shape& shape, MemoryKind kind) {
  if (shape_numel(shape) != static_cast<int64_t>(values.size()))
    throw std::invalid_argument("Tensor::from: " + std::to_string(values.size()) +
                                " values do not fill shape " + shape_str(shape));
  Tensor t = empty(shape, DType::f32, kind);
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  if (i < 0) i += n;
  if (i < 0 || i >= n) throw std::out_of_range("dim " + std::to_string(i) + " of shape " + shape_str(shape_));
  return shape_[static_cast<size_t>(i)];
}

MemoryKind Tensor::memory_kind() const {
  return storage_ ? storage_->kind() : MemoryKind::activation;
}

Tensor Tensor::view(const Shape& shape) const {
  Shape s = shape;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("view: more than one -1 in " + shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      throw std::invalid_argument("view: cannot infer -1 in " + shape_str(shape) + " from " + shape_str(shape_));
    s[static_cast<size_t>(infer)] = numel() / known;
  }
  if (shape_numel(s) != numel())
    throw std::invalid_argument("view: " + shape_str(shape_) + " cannot become " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  if (ndim() == 0 || begin < 0 || end > shape_[0] || begin > end)
    throw std::out_of_range("slice0 [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") of shape " + shape_str(shape_));
  Tensor t = *this;
  int64_t row = shape_[0] ? numel() / shape_[0] : 0;
  t.offset_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::clone(MemoryKind kind) const {
  Tensor t = empty(shape_, dtype_, kind);
  std::memcpy(t.raw(), raw(), bytes());
  t.scale_ = scale_;
  return t;
}

Tensor Tensor::to(DType dtype, MemoryKind kind) const {
  cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  if (dtype == dtype_) return clone(kind);
  if (dtype == DType::i32 || dtype_ == DType::i32)
    throw std::invalid_argument(std::string("cannot convert ") + dtype_name(dtype_) + " to " + dtype_name(dtype));
  Tensor t = empty(shape_, dtype, kind);
  t.scale_ = scale_;
  auto n = static_cast<size_t>(numel());
  const auto& dst = formats::preset(dtype_format_name(dtype));
  if (dtype_ == DType::f32) {
    formats::quantize(dst, f32(), t.raw(), n);
  } else if (dtype == DType::f32) {  // widening: decode straight into the result
    formats::dequantize(formats::preset(dtype_format_name(dtype_)), raw(), t.f32(), n);
  } else {
    std::vector<float> tmp(n);
    formats::dequantize(formats::preset(dtype_format_name(dtype_)), raw(), tmp.data(), n);
    formats::quantize(dst, tmp.data(), t.raw(), n);
  }
  return t;
}

std::vector<float> Tensor::to_vector() const {
  auto n = static_cast<size_t>(numel());
  std::vector<float> out(n);
  if (dtype_ == DType::i32) {
    const int32_t* p = data<int32_t>();
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
    return out;
  }
  if (dtype_ == DType::f32) std::memcpy(out.data(), raw(), n * sizeof(float));
  else formats::dequantize(formats::preset(dtype_format_name(dtype_)), raw(), out.data(), n);
  if (scale_ != 1.0f)
    for (float& v : out) v *= scale_;
  return out;
}

void Tensor::fill(float v) {
  auto n = static_cast<size_t>(numel());
  if (dtype_ == DType::f32) {
    float* p = f32();
    for (size_t i = 0; i < n; ++i) p[i] = v;
  } else if (dtype_ == DType::i32) {
    int32_t* p = data<int32_t>();
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(v);
  } else {
    std::vector<float> tmp(n, v);
    formats::quantize(formats::preset(dtype_format_name(dtype_)), tmp.data(), raw(), n);
  }
}

void Tensor::zero_() {
  // The all-zero code is +0 in every storage type here.
  std::memset(raw(), 0, bytes());
}

}  // namespace mantissa
