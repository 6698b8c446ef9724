// IDX files, plain or gzip-compressed: images and labels (two parts of the
// input) read as a Fashion-MNIST-style classification set, each also alone.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.hpp"
#include "mantissa/data/idx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mantissa;
  const auto parts = fuzz::split(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string images = fuzz::write("images-idx3-ubyte", parts[0]);
  const std::string labels = fuzz::write("labels-idx1-ubyte", parts.size() > 1 ? parts[1] : std::string_view());
  FUZZ_EXPECT_REFUSAL((void)data::read_idx(images));
  FUZZ_EXPECT_REFUSAL({
    const data::ClassificationSet set = data::load_idx_classification(images, labels, 10);
    if (set.size() > 0) {
      const int64_t first = 0;
      (void)set.gather(&first, 1);
    }
  });
  return 0;
}
