// safetensors files (https://github.com/huggingface/safetensors): 8-byte
// little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "string value", ...}}
// padded with spaces to a multiple of 8, then the raw little-endian data;
// offsets are relative to the end of the header.
//
// dtype names: F32, F16, BF16, F8_E4M3 (e4m3fn), F8_E5M2, I32; mantissa's
// e4m3fnuz / e5m2fnuz tensors are written as F8_E4M3FNUZ / F8_E5M2FNUZ (names
// outside the safetensors standard, used only in checkpoints). A tensor
// scale other than 1 is kept in __metadata__ under "mantissa.scale.<name>".
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/tensor/tensor.hpp"

namespace mantissa::io {

// A malformed, truncated or mismatching file. Derives from
// std::invalid_argument (CLI exit code 2); the message names the file and,
// where there is one, the tensor.
struct FormatError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

const char* safetensors_dtype_name(DType t);
DType parse_safetensors_dtype(const std::string& name);  // throws FormatError

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // without the mantissa.scale.* keys
};

// Tensors are laid out in the order given (names must be unique and not
// "__metadata__"). Written atomically: path.tmp, fsync, rename, fsync dir.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// The exact bytes save_safetensors writes (for hashing and golden tests).
std::string encode_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Reads and validates the whole file: header length within the file, JSON
// well formed, known dtypes, shapes non-negative, data_offsets in range,
// matching shape x dtype size, non-overlapping and covering the data
// exactly. Tensors are allocated under `kind`.
SafetensorsFile load_safetensors(const std::string& path, MemoryKind kind = MemoryKind::parameter);
SafetensorsFile decode_safetensors(const std::string& bytes, const std::string& name,
                                   MemoryKind kind = MemoryKind::parameter);

// Copies each file tensor into the matching destination after checking that
// the name exists, the dtype is the same and the shape equals the
// destination's; also refuses tensors in the file that no destination takes
// unless allow_extra. With widen_16bit, F16 and BF16 tensors also fill F32
// destinations (widened exactly, as Hugging Face checkpoints saved in half
// precision). Throws FormatError naming file and tensor.
void load_into(const SafetensorsFile& file, const std::string& file_name,
               const std::vector<std::pair<std::string, Tensor*>>& destinations, bool allow_extra = false,
               bool widen_16bit = false);

}  // namespace mantissa::io
