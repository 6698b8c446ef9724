// The weights of a model directory as Hugging Face's save_pretrained writes
// it: one model.safetensors, or shards listed by model.safetensors.index.json
//   {"metadata": {...}, "weight_map": {"tensor name": "model-00001-of-00002.safetensors", ...}}
// (what transformers writes for models above its max_shard_size).
#pragma once

#include <string>

#include "mantissa/io/safetensors.hpp"

namespace mantissa::io {

// The weights file (or index) of dir that read_model_dir reads, for messages.
std::string model_dir_weights_path(const std::string& dir);

// Every tensor of dir's weights. Shards are plain file names inside dir (no
// path separators, ending in .safetensors); each tensor must sit in the shard
// the index names, no tensor may appear twice, and every indexed tensor must
// be present. A directory holding only PyTorch's pickle files
// (pytorch_model.bin) is refused: reading them means running a pickle.
// Throws FormatError naming the file and, where there is one, the tensor.
SafetensorsFile read_model_dir(const std::string& dir, MemoryKind kind = MemoryKind::parameter);

}  // namespace mantissa::io
