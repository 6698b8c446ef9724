// mantissa.data's engine side: the tokenizer.json tokenizer (data::Tokenizer),
// the tokenize run `mantissa tokenize` makes (data::tokenize_file) and the
// llm.c token file writer (data::write_token_file). Each releases the GIL
// while it works. DataError (a std::invalid_argument) reaches Python as
// ValueError; a failed write (disk full, no permission) as OSError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/variant.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "arrays.hpp"
#include "mantissa/data/tokenizer.hpp"
#include "mantissa/data/tokens.hpp"

namespace mantissa::py {

namespace {

namespace fs = std::filesystem;

// A data::Tokenizer that Python threads share: encode runs without the GIL,
// one call at a time (the models cache the words they have seen).
struct Tokenizer {
  data::Tokenizer tokenizer;
  std::mutex encoding;

  explicit Tokenizer(data::Tokenizer&& t) : tokenizer(std::move(t)) {}
};

data::Tokenizer load_tokenizer(const fs::path& path) {
  nb::gil_scoped_release release;
  return data::Tokenizer::load(path.string());
}

std::unique_ptr<Tokenizer> parse_tokenizer(const std::string& json) {
  nb::gil_scoped_release release;
  return std::make_unique<Tokenizer>(data::Tokenizer::parse(json, "tokenizer JSON"));
}

// The UTF-8 bytes of a str (ValueError for lone surrogates, which UTF-8 cannot
// hold) or a bytes object, valid while text lives.
std::string_view utf8_of(const std::variant<nb::str, nb::bytes>& text) {
  if (const auto* b = std::get_if<nb::bytes>(&text)) return {b->c_str(), b->size()};
  Py_ssize_t n = 0;
  const char* s = PyUnicode_AsUTF8AndSize(std::get<nb::str>(text).ptr(), &n);
  if (s == nullptr) {
    PyErr_Clear();
    throw nb::value_error("text: the str holds lone surrogates, which UTF-8 cannot encode");
  }
  return {s, static_cast<size_t>(n)};
}

nb::ndarray<nb::numpy, uint32_t, nb::ndim<1>> encode(Tokenizer& t, const std::variant<nb::str, nb::bytes>& text) {
  const std::string_view utf8 = utf8_of(text);
  auto ids = std::make_unique<std::vector<uint32_t>>();
  {
    nb::gil_scoped_release release;
    std::lock_guard lock(t.encoding);
    *ids = t.tokenizer.encode(utf8);
  }
  // The array owns the vector: no copy of the ids.
  const size_t n = ids->size();
  uint32_t* data = ids->data();
  nb::capsule owner(ids.get(), [](void* p) noexcept { delete static_cast<std::vector<uint32_t>*>(p); });
  ids.release();
  return nb::ndarray<nb::numpy, uint32_t, nb::ndim<1>>(data, 1, &n, owner);
}

// Runs f without the GIL; the library's std::runtime_error (a failed system
// call while writing) is raised as OSError, its DataError as ValueError.
template <class F>
auto without_gil_writing(F&& f) {
  try {
    nb::gil_scoped_release release;
    return f();
  } catch (const std::runtime_error& e) {
    PyErr_SetString(PyExc_OSError, e.what());
    throw nb::python_error();
  }
}

nb::dict tokenize(const fs::path& tokenizer_path, const fs::path& in_path, const fs::path& out_path) {
  const data::TokenizeSummary s = without_gil_writing([&] {
    return data::tokenize_file({tokenizer_path.string(), in_path.string(), out_path.string()},
                               {"tokenizer_path", "in_path", "out_path"});
  });
  nb::dict d;
  d["tokens"] = s.tokens;
  d["text_bytes"] = s.text_bytes;
  d["vocab_size"] = s.vocab_size;
  d["kind"] = s.kind;
  d["load_seconds"] = s.load_seconds;
  d["encode_seconds"] = s.encode_seconds;
  return d;
}

using TokenIds = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

void write_token_file(const fs::path& path, const TokenIds& ids, uint64_t vocab_size) {
  const uint32_t* p = ids.data();
  const size_t n = ids.size();
  without_gil_writing([&] {
    data::write_token_file(path.string(), std::vector<uint32_t>(p, p + n), vocab_size);
    return 0;
  });
}

}  // namespace

void bind_data(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<Tokenizer>(m, "Tokenizer",
                        "A Hugging Face tokenizer.json (byte-level BPE, WordPiece) as `mantissa tokenize` reads it.")
      .def("__init__", [](Tokenizer* self, const fs::path& path) { new (self) Tokenizer(load_tokenizer(path)); },
           "path"_a,
           "Reads a tokenizer.json (at most 256 MiB); ValueError naming the file and the key for anything "
           "malformed or not implemented.")
      .def_static("from_str", &parse_tokenizer, "json"_a, "The same from the text of a tokenizer.json.")
      .def("encode", &encode, "text"_a,
           "The ids of text (str, or UTF-8 bytes) as uint32, as `tokenizers` encodes it with "
           "add_special_tokens=False; ValueError with the byte offset of invalid UTF-8.")
      .def_prop_ro("vocab_size", [](const Tokenizer& t) { return t.tokenizer.vocab_size(); },
                   "Largest id + 1 over the vocabulary and the added tokens.")
      .def_prop_ro("kind", [](const Tokenizer& t) { return t.tokenizer.kind(); },
                   "\"byte-level BPE\", \"WordPiece\", ...");
  m.attr("LLMC_MAGIC16") = data::kLlmcMagic16;
  m.attr("LLMC_MAGIC32") = data::kLlmcMagic32;
  m.def("tokenize", &tokenize, "tokenizer_path"_a, "in_path"_a, "out_path"_a,
        "What `mantissa tokenize --tokenizer TOKENIZER_PATH IN_PATH OUT_PATH` does; returns its counts and timings.");
  m.def("write_token_file", &write_token_file, "path"_a, "ids"_a, "vocab_size"_a,
        "ids (uint32, 1-D) as an llm.c token file, through a temporary file and a rename.");
}

}  // namespace mantissa::py
