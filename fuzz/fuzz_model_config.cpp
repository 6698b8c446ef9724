// A model's config.json from outside (a checkpoint's, or a Hugging Face
// one): the first byte picks the kind's reader (gpt, llama, bert, mlp, or the
// kind detect_model_kind finds), the rest is the file, read and validated as
// loading a checkpoint does before it allocates the model.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "mantissa/nn/models.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mantissa;
  if (size == 0) return 0;
  const auto& kinds = nn::model_kinds();
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t pick = data[0] % (kinds.size() + 1);
  const nn::ModelKind* kind = pick < kinds.size() ? &kinds[pick] : nn::find_model_kind(nn::detect_model_kind(text));
  if (!kind) return 0;
  FUZZ_EXPECT_REFUSAL(kind->check(text));
  return 0;
}
