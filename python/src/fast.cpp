// mantissa._core: the public quantize / encode / decode. A call on numpy
// arrays goes straight to the kernel through numpy's C API: no DLPack capsule,
// no Python wrapper frame, the format and rounding strings recognised by the
// identity of the last ones seen, the result allocated by numpy (or none with
// `out=`), the GIL released only from 16 Ki values up. Anything else (PyTorch
// tensors, ml_dtypes outputs, packed codes, bad arguments) goes to the
// general path in mantissa/__init__.py (_quantize_any, ...), which checks and
// reports it.
#define PY_ARRAY_UNIQUE_SYMBOL mantissa_py_ARRAY_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <nanobind/nanobind.h>
// clang-format off: numpy's header needs Python.h (from nanobind) first.
#include <numpy/arrayobject.h>
// clang-format on

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "arrays.hpp"
#include "formats.hpp"
#include "mantissa/formats/convert.hpp"

namespace mantissa::py {
namespace {

// The last Python string seen for an argument and what it parsed to: the
// strings a program passes are mostly the same objects call after call
// (literals, interned), so a pointer comparison replaces parsing. Keeps a
// reference to the string so that its address cannot be reused. Only touched
// with the GIL held.
template <class T>
struct LastSeen {
  PyObject* key = nullptr;
  T value{};

  template <class Parse>
  const T* get(PyObject* s, Parse parse) {
    if (s == key) return &value;
    Py_ssize_t n = 0;
    const char* u = PyUnicode_Check(s) ? PyUnicode_AsUTF8AndSize(s, &n) : nullptr;
    if (u == nullptr) {
      PyErr_Clear();
      return nullptr;  // not a str: the general path names the problem
    }
    value = parse(std::string(u, static_cast<size_t>(n)));  // throws ValueError on a bad spelling
    Py_INCREF(s);
    Py_XDECREF(key);
    key = s;
    return &value;
  }
};

// A copy: the kernel may run after another thread has replaced `last`.
FormatPtr format_arg(nb::handle s) {
  static LastSeen<FormatPtr> last;
  const FormatPtr* f = last.get(s.ptr(), [](const std::string& spec) { return format_of(spec); });
  return f ? *f : nullptr;
}

const mf::Round* round_arg(nb::handle s) {
  static LastSeen<mf::Round> last;
  return last.get(s.ptr(), [](const std::string& r) { return round_options(r, false, false, 0, 16).mode; });
}

// x as a numpy array the kernels can read in place (exact ndarray, native
// byte order, aligned, C-contiguous, of `type`), or null.
PyArrayObject* plain(nb::handle x, int type) {
  if (!PyArray_CheckExact(x.ptr())) return nullptr;
  auto* a = reinterpret_cast<PyArrayObject*>(x.ptr());
  if (PyArray_TYPE(a) != type || !PyArray_ISCARRAY_RO(a) || !PyArray_ISNOTSWAPPED(a)) return nullptr;
  return a;
}

// The caller's `out` if it can be written in place with x's shape, or null.
PyArrayObject* plain_out(nb::handle out, int type, PyArrayObject* x) {
  PyArrayObject* o = plain(out, type);
  if (o == nullptr || !PyArray_ISWRITEABLE(o) || !PyArray_SAMESHAPE(o, x)) return nullptr;
  return o;
}

// Where the result goes: `out` (returned as is) or a new array of x's shape.
struct Result {
  nb::object array;
  void* data;
};

Result result(nb::handle out, PyArrayObject* o, PyArrayObject* x, int type) {
  if (o != nullptr) return {nb::borrow(out), PyArray_DATA(o)};
  PyObject* a = PyArray_SimpleNew(PyArray_NDIM(x), PyArray_DIMS(x), type);
  if (a == nullptr) throw nb::python_error();
  return {nb::steal(a), PyArray_DATA(reinterpret_cast<PyArrayObject*>(a))};
}

Bytes bytes_of(PyArrayObject* a, const char* name) {
  return {PyArray_DATA(a), static_cast<size_t>(PyArray_NBYTES(a)), name};
}

int code_type(const mf::Format& f) {
  return f.storage_bytes() == 1 ? NPY_UINT8 : f.storage_bytes() == 2 ? NPY_UINT16 : NPY_UINT32;
}

// mantissa.<name>(*args): the general path, in Python.
nb::object general(const char* name, const nb::tuple& args) {
  static PyObject* module = nullptr;
  if (module == nullptr) module = nb::module_::import_("mantissa").release().ptr();
  nb::object fn = nb::handle(module).attr(name);
  PyObject* r = PyObject_Call(fn.ptr(), args.ptr(), nullptr);
  if (r == nullptr) throw nb::python_error();
  return nb::steal(r);
}

nb::object quantize(nb::handle x, nb::handle format, nb::handle round, bool saturate, bool flush, nb::handle seed_arg,
                    nb::handle bits_arg, nb::handle out) {
  const uint64_t seed = u64_arg(seed_arg, "seed");
  const int random_bits = static_cast<int>(int_arg(bits_arg, "random_bits", 1, 32));
  PyArrayObject* a = plain(x, NPY_FLOAT32);
  PyArrayObject* o = a != nullptr && !out.is_none() ? plain_out(out, NPY_FLOAT32, a) : nullptr;
  const FormatPtr f = a != nullptr && (out.is_none() || o != nullptr) ? format_arg(format) : nullptr;
  const mf::Round* r = f != nullptr ? round_arg(round) : nullptr;
  if (r == nullptr)
    return general("_quantize_any", nb::make_tuple(x, format, round, saturate, flush, seed, random_bits, out));
  if (o != nullptr) check_apart({bytes_of(a, "x")}, {bytes_of(o, "out")}, true);
  const mf::RoundOptions opt{
      .mode = *r, .saturate = saturate, .flush_subnormals = flush, .random_bits = random_bits, .seed = seed};
  Result res = result(out, o, a, NPY_FLOAT32);
  const auto n = static_cast<size_t>(PyArray_SIZE(a));
  KernelScope release(n);
  mf::fake_quantize(*f, static_cast<const float*>(PyArray_DATA(a)), static_cast<float*>(res.data), n, opt);
  return std::move(res.array);
}

nb::object encode(nb::handle x, nb::handle format, nb::handle round, bool saturate, bool flush, nb::handle seed_arg,
                  nb::handle bits_arg, bool packed, nb::handle out) {
  const uint64_t seed = u64_arg(seed_arg, "seed");
  const int random_bits = static_cast<int>(int_arg(bits_arg, "random_bits", 1, 32));
  PyArrayObject* a = packed ? nullptr : plain(x, NPY_FLOAT32);
  const FormatPtr f = a != nullptr ? format_arg(format) : nullptr;
  PyArrayObject* o = f != nullptr && !out.is_none() ? plain_out(out, code_type(*f), a) : nullptr;
  const mf::Round* r = f != nullptr && (out.is_none() || o != nullptr) ? round_arg(round) : nullptr;
  if (r == nullptr)
    return general("_encode_any", nb::make_tuple(x, format, round, saturate, flush, seed, random_bits, packed, out));
  if (o != nullptr) check_apart({bytes_of(a, "x")}, {bytes_of(o, "out")});
  const mf::RoundOptions opt{
      .mode = *r, .saturate = saturate, .flush_subnormals = flush, .random_bits = random_bits, .seed = seed};
  Result res = result(out, o, a, code_type(*f));
  const auto n = static_cast<size_t>(PyArray_SIZE(a));
  KernelScope release(n);
  mf::quantize(*f, static_cast<const float*>(PyArray_DATA(a)), res.data, n, opt);
  return std::move(res.array);
}

nb::object decode(nb::handle codes, nb::handle format, bool packed, nb::handle count, nb::handle out) {
  const FormatPtr f = !packed && count.is_none() && PyArray_CheckExact(codes.ptr()) ? format_arg(format) : nullptr;
  PyArrayObject* a = f != nullptr ? plain(codes, code_type(*f)) : nullptr;
  PyArrayObject* o = a != nullptr && !out.is_none() ? plain_out(out, NPY_FLOAT32, a) : nullptr;
  if (a == nullptr || (!out.is_none() && o == nullptr))
    return general("_decode_any", nb::make_tuple(codes, format, packed, count, out));
  if (o != nullptr) check_apart({bytes_of(a, "codes")}, {bytes_of(o, "out")});
  const auto n = static_cast<size_t>(PyArray_SIZE(a));
  if (f->storage_bytes() == 1) check_code_range(static_cast<const uint8_t*>(PyArray_DATA(a)), n, *f, false);
  Result res = result(out, o, a, NPY_FLOAT32);
  KernelScope release(n);
  mf::dequantize(*f, PyArray_DATA(a), static_cast<float*>(res.data), n);
  return std::move(res.array);
}

// dst = src (numpy arrays of the same byte size) split across the library's
// threads in 64-byte-aligned chunks: the memory floor the benchmarks compare
// casts against.
void memcpy_threads(nb::handle src, nb::handle dst) {
  auto* s = PyArray_CheckExact(src.ptr()) ? reinterpret_cast<PyArrayObject*>(src.ptr()) : nullptr;
  auto* d = PyArray_CheckExact(dst.ptr()) ? reinterpret_cast<PyArrayObject*>(dst.ptr()) : nullptr;
  if (s == nullptr || d == nullptr || !PyArray_ISCARRAY_RO(s) || !PyArray_ISCARRAY(d) ||
      PyArray_NBYTES(s) != PyArray_NBYTES(d))
    throw nb::value_error("memcpy: src and dst must be C-contiguous numpy arrays of the same byte size, dst writable");
  check_apart({bytes_of(s, "src")}, {bytes_of(d, "dst")});
  const auto n = static_cast<size_t>(PyArray_NBYTES(s));
  const auto* from = static_cast<const char*>(PyArray_DATA(s));
  auto* to = static_cast<char*>(PyArray_DATA(d));
  nb::gil_scoped_release release;
#pragma omp parallel
  {
    const auto threads = static_cast<size_t>(omp_get_num_threads()), t = static_cast<size_t>(omp_get_thread_num());
    const size_t chunk = ((n + threads - 1) / threads + 63) / 64 * 64, begin = std::min(n, t * chunk);
    std::memcpy(to + begin, from + begin, std::min(n, begin + chunk) - begin);
  }
}

}  // namespace

void bind_fast(nb::module_& m) {
  if (_import_array() < 0) throw nb::python_error();
  using namespace nb::literals;
  m.def("quantize", &quantize, "x"_a, "format"_a, "round"_a = "nearest-even", nb::kw_only(), "saturate"_a = false,
        "flush_subnormals"_a = false, "seed"_a = 0, "random_bits"_a = 16, "out"_a = nb::none(),
        nb::sig("def quantize(x: typing.Any, format: str, round: str = 'nearest-even', *, saturate: bool = False, "
                "flush_subnormals: bool = False, seed: int = 0, random_bits: int = 16, out: typing.Any = None) "
                "-> typing.Any"),
        R"(fp32 values rounded into `format`, kept as fp32 (fake quantisation).

round: nearest-even (alias "nearest"), nearest-away, toward-zero, up, down,
stochastic (element i draws from hash(seed, i): independent of threads).
saturate: overflow gives +-max instead of inf/NaN. flush_subnormals: results
below the format's min normal become +-0. Writes into `out` (float32, x's
shape, writable, x itself or apart from it) if given, and returns it; x and
out are numpy arrays or CPU DLPack tensors (the result is then of x's kind).
seed: 0..2^64-1.)");
  m.def("encode", &encode, "x"_a, "format"_a, "round"_a = "nearest-even", nb::kw_only(), "saturate"_a = false,
        "flush_subnormals"_a = false, "seed"_a = 0, "random_bits"_a = 16, "packed"_a = false, "out"_a = nb::none(),
        nb::sig("def encode(x: typing.Any, format: str, round: str = 'nearest-even', *, saturate: bool = False, "
                "flush_subnormals: bool = False, seed: int = 0, random_bits: int = 16, packed: bool = False, "
                "out: typing.Any = None) -> typing.Any"),
        R"(fp32 -> codes: uint8 (<= 8 bits), uint16 (bf16, fp16) or uint32 (tf32, fp32 bit patterns).

Rounding options as quantize. packed: formats of <= 4 bits put two codes in a
byte along the last axis, element 2j in the low nibble (last axis K ->
ceil(K / 2) bytes). `out` may be an integer array of the codes' type or an
ml_dtypes array of the same format, writable and apart from x.)");
  m.def("memcpy", &memcpy_threads, "src"_a, "dst"_a,
        "dst = src on the library's threads (the memory floor the benchmarks compare against).");
  m.def("decode", &decode, "codes"_a, "format"_a, nb::kw_only(), "packed"_a = false, "count"_a = nb::none(),
        "out"_a = nb::none(),
        nb::sig("def decode(codes: typing.Any, format: str, *, packed: bool = False, count: int | None = None, "
                "out: typing.Any = None) -> typing.Any"),
        R"(Codes (integers, or an ml_dtypes array of the same format) -> their exact fp32 values.

packed: two 4-bit codes per byte; `count` is the unpacked last-axis length
(default 2 x bytes). `out`: writable, apart from codes.)");
}

}  // namespace mantissa::py
