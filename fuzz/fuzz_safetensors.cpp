// safetensors bytes -> decode_safetensors, then every tensor decoded to f32
// and loaded into destinations of its own shape.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "mantissa/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mantissa;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  FUZZ_EXPECT_REFUSAL({
    io::SafetensorsFile f = io::decode_safetensors(bytes, "fuzz.safetensors");
    std::vector<Tensor> copies;
    std::vector<std::pair<std::string, Tensor*>> dst;
    copies.reserve(f.tensors.size());
    for (const auto& [name, t] : f.tensors) {
      (void)t.to(DType::f32);
      copies.push_back(Tensor::zeros(t.shape(), t.dtype()));
      dst.emplace_back(name, &copies.back());
    }
    io::load_into(f, "fuzz.safetensors", dst);
  });
  return 0;
}
