// Checks on the arrays handed to the bindings (numpy or any DLPack producer):
// every failure is a Python exception naming the argument, never a crash.
// Wrong element type -> TypeError; wrong device, layout or size -> ValueError.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
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

// An integer argument (a Python int, or anything with __index__ such as a
// numpy integer): TypeError for other kinds, ValueError naming the argument
// and its range when out of it (nanobind's own casts give a generic TypeError).
inline nb::object index_arg(nb::handle h, const char* name) {
  PyObject* i = PyNumber_Index(h.ptr());
  if (i == nullptr) {
    PyErr_Clear();
    throw nb::type_error((std::string(name) + ": expected an int, got " + Py_TYPE(h.ptr())->tp_name).c_str());
  }
  return nb::steal(i);
}

inline std::string out_of_range(const char* name, const std::string& range, const nb::object& value) {
  return std::string(name) + ": must be in " + range + ", got " + nb::str(value).c_str();
}

inline uint64_t u64_arg(nb::handle h, const char* name) {
  nb::object i = index_arg(h, name);
  const unsigned long long v = PyLong_AsUnsignedLongLong(i.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();  // negative, or 2^64 and above
    throw nb::value_error(out_of_range(name, "0..2^64-1", i).c_str());
  }
  return v;
}

inline int64_t int_arg(nb::handle h, const char* name, int64_t lo, int64_t hi) {
  nb::object i = index_arg(h, name);
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  if (overflow != 0 || v < lo || v > hi)
    throw nb::value_error(out_of_range(name, std::to_string(lo) + ".." + std::to_string(hi), i).c_str());
  return v;
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

// Values in an array of `shape`, refused (ValueError naming `name`) when the
// product, or its bytes, would not fit in memory's address range.
inline size_t checked_size(const std::vector<size_t>& shape, size_t item_bytes, const char* name) {
  size_t n = 1;
  for (size_t s : shape) {
    if (s != 0 && n > std::numeric_limits<size_t>::max() / s) n = std::numeric_limits<size_t>::max();
    else n *= s;
  }
  if (n > static_cast<size_t>(std::numeric_limits<std::ptrdiff_t>::max()) / item_bytes)
    throw nb::value_error((std::string(name) + ": the result would be too large to allocate").c_str());
  return n;
}

// A new numpy array of `shape` owning its memory.
template <class T>
nb::ndarray<nb::numpy, T> new_array(const std::vector<size_t>& shape) {
  const size_t n = checked_size(shape, sizeof(T), "shape");
  T* data = new T[n > 0 ? n : 1];
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return nb::ndarray<nb::numpy, T>(data, shape.size(), shape.data(), owner);
}

// The bytes an array's values occupy: one run, for the C-contiguous arrays the
// checks above let through (and numpy's C arrays on the direct path).
struct Bytes {
  const void* data;
  size_t size;
  const char* name;
};

template <class A>
Bytes bytes_of(const A& a, const char* name) {
  return {a.data(), a.nbytes(), name};
}

// No output may share a byte with an input or another output: the kernels
// read and write in blocks and on several threads, so an overlap gives wrong
// values (ValueError naming both arguments). Inputs may overlap each other.
// in_place: an output that is exactly an input (same bytes) is allowed, for
// the element-wise kernels that read each value before writing its place.
inline void check_apart(std::initializer_list<Bytes> inputs, std::initializer_list<Bytes> outputs,
                        bool in_place = false) {
  auto overlap = [](const Bytes& a, const Bytes& b) {
    const auto x = reinterpret_cast<uintptr_t>(a.data), y = reinterpret_cast<uintptr_t>(b.data);
    return a.size != 0 && b.size != 0 && x < y + b.size && y < x + a.size;
  };
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (const Bytes& other : inputs)
      if (overlap(*o, other) && !(in_place && o->data == other.data && o->size == other.size))
        throw nb::value_error((std::string(o->name) + ": overlaps the input " + other.name +
                               " in memory; write into a separate array")
                                  .c_str());
    for (auto p = outputs.begin(); p != o; ++p)
      if (overlap(*o, *p))
        throw nb::value_error((std::string(o->name) + ": overlaps " + p->name + " in memory; give each its own array")
                                  .c_str());
  }
}

// False when some page of [data, data + size) is mapped without write
// permission (a read-only memmap behind a torch tensor, which carries no flag
// saying so). Read from /proc/self/maps; where that is missing, true.
inline bool writable_memory(const void* data, size_t size) {
  if (size == 0) return true;
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return true;
  uintptr_t at = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = at + size;
  unsigned long lo = 0, hi = 0;
  char perms[8] = {};
  char line[512];
  bool ok = true;
  while (at < end && std::fgets(line, sizeof line, maps) != nullptr) {
    if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || hi <= at) continue;
    if (lo > at || perms[1] != 'w') {  // unmapped, or mapped without write access
      ok = false;
      break;
    }
    at = hi;
  }
  std::fclose(maps);
  return ok && at >= end;
}

// The caller's output array after checks (dtype T, layout, writable memory,
// shape, no overlap with `inputs` but in_place's), or a new one.
template <class T>
nb::object output(std::optional<Out>& out, const std::vector<size_t>& shape, T** data,
                  std::initializer_list<Bytes> inputs, const char* name = "out", bool in_place = false) {
  if (!out) {
    auto a = new_array<T>(shape);
    *data = a.data();
    return nb::cast(a);
  }
  check_layout(*out, name);
  if (out->dtype() != nb::dtype<T>())
    throw nb::type_error((std::string(name) + ": expected " + dtype_text(nb::dtype<T>()) + ", got " +
                          dtype_text(out->dtype()))
                             .c_str());
  bool same = out->ndim() == shape.size();
  for (size_t d = 0; same && d < shape.size(); ++d) same = out->shape(d) == shape[d];
  if (!same) throw nb::value_error((std::string(name) + ": the array has the wrong shape").c_str());
  if (!writable_memory(out->data(), out->nbytes()))
    throw nb::value_error((std::string(name) + ": the array is read-only (its memory is mapped without write access)").c_str());
  check_apart(inputs, {bytes_of(*out, name)}, in_place);
  *data = static_cast<T*>(out->data());
  return nb::none();
}

}  // namespace mantissa::py
