#include "mantissa/io/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/io/untrusted.hpp"

namespace mantissa::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace {

constexpr const char* kScalePrefix = "mantissa.scale.";
// Same bound as the reference implementation: a larger header is refused
// before allocating for it.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void fail(const std::string& file, const std::string& msg) {
  throw FormatError(file + ": " + msg);
}
[[noreturn]] void fail_tensor(const std::string& file, const std::string& tensor, const std::string& msg) {
  throw FormatError(file + ": tensor '" + excerpt(tensor) + "': " + msg);
}

std::string float_exact(float v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", static_cast<double>(v));
  return buf;
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::e4m3fn: return "F8_E4M3";
    case DType::e5m2: return "F8_E5M2";
    case DType::e4m3fnuz: return "F8_E4M3FNUZ";
    case DType::e5m2fnuz: return "F8_E5M2FNUZ";
    case DType::i32: return "I32";
  }
  return "?";
}

DType parse_safetensors_dtype(const std::string& name) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::e4m3fn, DType::e5m2, DType::e4m3fnuz,
                  DType::e5m2fnuz, DType::i32})
    if (name == safetensors_dtype_name(t)) return t;
  throw FormatError("unknown dtype '" + excerpt(name) +
                    "' (mantissa reads F32, F16, BF16, F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, I32)");
}

std::string encode_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) {
    if (k.rfind(kScalePrefix, 0) == 0)
      throw std::invalid_argument("safetensors metadata key '" + k + "' is reserved for tensor scales");
    meta[k] = v;
  }
  for (const auto& [name, t] : tensors)
    if (t.defined() && t.scale() != 1.0f) meta[kScalePrefix + name] = float_exact(t.scale());
  if (!meta.empty()) header["__metadata__"] = meta;

  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || name.empty())
      throw std::invalid_argument("safetensors: invalid tensor name '" + name + "'");
    if (!seen.insert(name).second) throw std::invalid_argument("safetensors: duplicate tensor name '" + name + "'");
    if (!t.defined()) throw std::invalid_argument("safetensors: tensor '" + name + "' is undefined");
    nlohmann::ordered_json e;
    e["dtype"] = safetensors_dtype_name(t.dtype());
    e["shape"] = t.shape();
    e["data_offsets"] = {offset, offset + t.bytes()};
    header[name] = e;
    offset += t.bytes();
  }
  std::string json = header.dump();
  // Pad with spaces so the data starts 8-byte aligned (as the reference does).
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + json.size() + offset);
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  out += json;
  for (const auto& [name, t] : tensors) out.append(static_cast<const char*>(t.raw()), t.bytes());
  return out;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, encode_safetensors(tensors, metadata));
}

SafetensorsFile decode_safetensors(const std::string& bytes, const std::string& file, MemoryKind kind) {
  if (bytes.size() < 8)
    fail(file, "truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  if (n > kMaxHeaderBytes) fail(file, "header length " + std::to_string(n) + " is implausibly large (corrupt file?)");
  if (n > bytes.size() - 8)
    fail(file, "truncated: header length " + std::to_string(n) + " but only " + std::to_string(bytes.size() - 8) +
                   " bytes follow");
  nlohmann::json header;
  try {
    header = parse_json(std::string_view(bytes).substr(8, n), "header");
  } catch (const std::invalid_argument& e) {
    fail(file, e.what());
  }
  if (!header.is_object()) fail(file, "header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;

  SafetensorsFile out;
  std::map<std::string, float> scales;
  struct Span { uint64_t begin, end; std::string name; };
  std::vector<Span> spans;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) fail(file, "__metadata__ is not an object");
      for (const auto& [k, v] : e.items()) {
        if (!v.is_string()) fail(file, "__metadata__ value of '" + excerpt(k) + "' is not a string");
        std::string s = v.get<std::string>();
        if (k.rfind(kScalePrefix, 0) == 0) {
          char* end = nullptr;
          float sc = std::strtof(s.c_str(), &end);
          if (s.empty() || *end != '\0' || !std::isfinite(sc) || !(sc > 0))
            fail(file, "bad scale '" + excerpt(s) + "' in __metadata__ key '" + excerpt(k) +
                           "' (must be a finite number > 0)");
          scales[k.substr(std::strlen(kScalePrefix))] = sc;
        } else {
          out.metadata[k] = s;
        }
      }
      continue;
    }
    if (!e.is_object()) fail_tensor(file, name, "entry is not an object");
    if (!e.contains("dtype") || !e["dtype"].is_string()) fail_tensor(file, name, "missing dtype");
    if (!e.contains("shape") || !e["shape"].is_array()) fail_tensor(file, name, "missing shape");
    if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
      fail_tensor(file, name, "missing or malformed data_offsets");
    DType dtype;
    try {
      dtype = parse_safetensors_dtype(e["dtype"].get<std::string>());
    } catch (const FormatError& err) {
      fail_tensor(file, name, err.what());
    }
    Shape shape;
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) fail_tensor(file, name, "shape has a non-integer or negative dimension");
      auto v = d.get<uint64_t>();
      if (v != 0 && numel > (uint64_t{1} << 48) / v) fail_tensor(file, name, "shape is implausibly large");
      numel *= v;
      shape.push_back(static_cast<int64_t>(v));
    }
    const auto& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail_tensor(file, name, "data_offsets are not non-negative integers");
    uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    if (b > en) fail_tensor(file, name, "data_offsets begin " + std::to_string(b) + " > end " + std::to_string(en));
    if (en > data_size)
      fail_tensor(file, name, "data_offsets end " + std::to_string(en) + " beyond the " + std::to_string(data_size) +
                                  " data bytes (truncated file?)");
    uint64_t want = numel * dtype_size(dtype);
    if (en - b != want)
      fail_tensor(file, name, "data_offsets span " + std::to_string(en - b) + " bytes but shape " + shape_str(shape) +
                                  " of " + e["dtype"].get<std::string>() + " needs " + std::to_string(want));
    spans.push_back({b, en, name});
    Tensor t = Tensor::empty(shape, dtype, kind);
    if (want) std::memcpy(t.raw(), data + b, want);
    out.tensors.emplace(name, std::move(t));
  }
  // The data must be covered exactly once, in any order: no overlap, no gap,
  // no trailing bytes (trailing bytes mean a wrong header length).
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) {
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  uint64_t pos = 0;
  for (const Span& s : spans) {
    if (s.begin < pos) fail_tensor(file, s.name, "data overlaps another tensor's");
    if (s.begin > pos) fail_tensor(file, s.name, "gap of unused bytes before this tensor's data");
    pos = s.end;
  }
  if (pos != data_size)
    fail(file, std::to_string(data_size - pos) + " trailing bytes after the last tensor's data");
  for (const auto& [name, sc] : scales) {
    auto it = out.tensors.find(name);
    if (it == out.tensors.end()) fail(file, "__metadata__ holds a scale for unknown tensor '" + excerpt(name) + "'");
    it->second.set_scale(sc);
  }
  return out;
}

SafetensorsFile load_safetensors(const std::string& path, MemoryKind kind) {
  std::string bytes;
  try {
    bytes = read_file(path);
  } catch (const std::invalid_argument& e) {
    throw FormatError(e.what());
  }
  return decode_safetensors(bytes, path, kind);
}

void load_into(const SafetensorsFile& file, const std::string& file_name,
               const std::vector<std::pair<std::string, Tensor*>>& destinations, bool allow_extra, bool widen_16bit) {
  auto widens = [&](const Tensor& src, const Tensor& dst) {
    return widen_16bit && dst.dtype() == DType::f32 && (src.dtype() == DType::f16 || src.dtype() == DType::bf16);
  };
  std::set<std::string> taken;
  // Check everything before copying anything, so a refused file leaves the
  // destinations untouched.
  for (const auto& [name, dst] : destinations) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) fail_tensor(file_name, name, "missing from the file");
    const Tensor& src = it->second;
    if (!dst || !dst->defined()) fail_tensor(file_name, name, "destination tensor is undefined");
    if (src.dtype() != dst->dtype() && !widens(src, *dst))
      fail_tensor(file_name, name, std::string("dtype ") + safetensors_dtype_name(src.dtype()) + " but " +
                                       safetensors_dtype_name(dst->dtype()) + " expected");
    if (src.shape() != dst->shape())
      fail_tensor(file_name, name, "shape " + shape_str(src.shape()) + " but " + shape_str(dst->shape()) + " expected");
    taken.insert(name);
  }
  if (!allow_extra)
    for (const auto& [name, t] : file.tensors)
      if (!taken.count(name)) fail_tensor(file_name, name, "unexpected tensor (not in the model)");
  for (const auto& [name, dst] : destinations) {
    const Tensor& src = file.tensors.at(name);
    if (src.dtype() != dst->dtype())  // widened exactly, decoded straight into the destination
      formats::dequantize(formats::preset(dtype_format_name(src.dtype())), src.raw(), dst->f32(),
                          static_cast<size_t>(src.numel()));
    else
      std::memcpy(dst->raw(), src.raw(), src.bytes());
    dst->set_scale(src.scale());
  }
}

}  // namespace mantissa::io
