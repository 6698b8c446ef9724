// Checks on the arrays handed to the bindings (numpy or any DLPack producer):
// every failure is a Python exception naming the argument, never a crash.
// Wrong element type -> TypeError; wrong device, layout or size -> ValueError.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mantissa::py {

namespace nb = nanobind;

// Read-only view of any CPU array; writable ones are nb::ndarray<>.
using In = nb::ndarray<nb::ro>;
using Out = nb::ndarray<>;

inline std::string dtype_text(nb::dlpack::dtype t) {
  const char* kind = t.code == uint8_t(nb::dlpack::dtype_code::Float)  ? "float"
                     : t.code == uint8_t(nb::dlpack::dtype_code::Int)  ? "int"
                     : t.code == uint8_t(nb::dlpack::dtype_code::UInt) ? "uint"
                     : t.code == uint8_t(nb::dlpack::dtype_code::Bfloat) ? "bfloat"
                                                                          : "other";
  return std::string(kind) + std::to_string(t.bits);
}

// CPU, C-contiguous (unit-length dimensions, and empty arrays, may have any strides).
template <class A>
void check_layout(const A& a, const char* name) {
  if (a.device_type() != nb::device::cpu::value)
    throw nb::value_error((std::string(name) + ": the array must be on the CPU").c_str());
  if (a.size() == 0) return;
  int64_t expect = 1;
  for (size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != expect)
      throw nb::value_error((std::string(name) +
                             ": the array must be C-contiguous (np.ascontiguousarray / tensor.contiguous())")
                                .c_str());
    expect *= static_cast<int64_t>(a.shape(d));
  }
}

template <class A>
void check_dtype(const A& a, const char* name, nb::dlpack::dtype want, const char* want_text) {
  if (a.dtype() != want)
    throw nb::type_error((std::string(name) + ": expected " + want_text + " values, got " + dtype_text(a.dtype())).c_str());
}

// Unsigned or signed integers (or ml_dtypes codes viewed as such) of `bytes` bytes.
template <class A>
void check_codes(const A& a, const char* name, int bytes) {
  const auto t = a.dtype();
  const bool integer = t.code == uint8_t(nb::dlpack::dtype_code::UInt) || t.code == uint8_t(nb::dlpack::dtype_code::Int);
  if (!integer || t.bits != 8 * bytes || t.lanes != 1)
    throw nb::type_error((std::string(name) + ": expected " + std::to_string(8 * bytes) +
                          "-bit integer codes (uint" + std::to_string(8 * bytes) + "), got " + dtype_text(t))
                             .c_str());
}

// x's float32 values, after the layout and dtype checks.
inline const float* f32_input(const In& x) {
  check_layout(x, "x");
  check_dtype(x, "x", nb::dtype<float>(), "float32");
  return static_cast<const float*>(x.data());
}

inline std::vector<size_t> shape_of(const In& a) {
  std::vector<size_t> s(a.ndim());
  for (size_t d = 0; d < a.ndim(); ++d) s[d] = a.shape(d);
  return s;
}

// Releases the GIL around a kernel on `n` values, but only from 16 Ki values
// up: below that the kernel takes about as long as the release and
// re-acquire, and the library runs it on the calling thread anyway.
class KernelScope {
 public:
  explicit KernelScope(size_t n) {
    if (n >= (size_t{1} << 14)) release_.emplace();
  }

 private:
  std::optional<nb::gil_scoped_release> release_;
};

// A new numpy array of `shape` owning its memory.
template <class T>
nb::ndarray<nb::numpy, T> new_array(const std::vector<size_t>& shape) {
  size_t n = 1;
  for (size_t s : shape) n *= s;
  T* data = new T[n > 0 ? n : 1];
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return nb::ndarray<nb::numpy, T>(data, shape.size(), shape.data(), owner);
}

// The caller's output array after checks (dtype T, layout, shape), or a new one.
template <class T>
nb::object output(std::optional<Out>& out, const std::vector<size_t>& shape, T** data) {
  if (!out) {
    auto a = new_array<T>(shape);
    *data = a.data();
    return nb::cast(a);
  }
  check_layout(*out, "out");
  if (out->dtype() != nb::dtype<T>())
    throw nb::type_error(("out: expected " + dtype_text(nb::dtype<T>()) + ", got " + dtype_text(out->dtype())).c_str());
  bool same = out->ndim() == shape.size();
  for (size_t d = 0; same && d < shape.size(); ++d) same = out->shape(d) == shape[d];
  if (!same) throw nb::value_error("out: the array has the wrong shape");
  *data = static_cast<T*>(out->data());
  return nb::none();
}

}  // namespace mantissa::py
