// Tensor: n-dimensional, row-major, contiguous storage in one of the engine's
// storage types, with a per-tensor scale so that recipes can keep data in 8
// and 16 bits for real (value = decoded code x scale).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "mantissa/tensor/memory.hpp"

namespace mantissa {

enum class DType : uint8_t { f32, bf16, f16, e4m3fn, e5m2, e4m3fnuz, e5m2fnuz, i32 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);
// The formats-module preset name of a floating dtype ("fp32", "bf16", ...).
const char* dtype_format_name(DType t);
DType parse_dtype(const std::string& name);  // throws std::invalid_argument

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);

// Owns bytes counted by the allocator under one MemoryKind.
class Storage {
 public:
  Storage(size_t bytes, MemoryKind kind);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() { return data_; }
  size_t bytes() const { return bytes_; }
  MemoryKind kind() const { return kind_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemoryKind kind_;
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype = DType::f32,
                      MemoryKind kind = MemoryKind::activation);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32,
                      MemoryKind kind = MemoryKind::activation);
  static Tensor from(const std::vector<float>& values, const Shape& shape,
                     MemoryKind kind = MemoryKind::activation);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  // Throws std::invalid_argument if the size overflows (checked.hpp).
  size_t bytes() const;
  MemoryKind memory_kind() const;

  void* raw() { return static_cast<char*>(storage_->data()) + offset_; }
  const void* raw() const { return static_cast<const char*>(storage_->data()) + offset_; }
  template <class T> T* data() { return static_cast<T*>(raw()); }
  template <class T> const T* data() const { return static_cast<const T*>(raw()); }
  float* f32() { return data<float>(); }
  const float* f32() const { return data<float>(); }

  // value = decoded code x scale; 1 for plain tensors.
  float scale() const { return scale_; }
  void set_scale(float s) { scale_ = s; }

  // Same storage, new shape (numel must match). One -1 is inferred.
  Tensor view(const Shape& shape) const;
  // Rows [begin, end) of dim 0, sharing storage.
  Tensor slice0(int64_t begin, int64_t end) const;
  Tensor clone(MemoryKind kind) const;
  Tensor clone() const { return clone(memory_kind()); }
  // Convert to another storage type (round-to-nearest-even); scale kept.
  Tensor to(DType dtype, MemoryKind kind) const;
  Tensor to(DType dtype) const { return to(dtype, memory_kind()); }
  // Decoded values x scale, as fp32.
  std::vector<float> to_vector() const;
  void fill(float v);
  void zero_();
  bool same_storage(const Tensor& o) const { return storage_ == o.storage_; }
  // No other Tensor (or view) shares this storage: safe to write in place.
  bool storage_unique() const { return storage_ && storage_.use_count() == 1; }

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  DType dtype_ = DType::f32;
  float scale_ = 1.0f;
};

}  // namespace mantissa
