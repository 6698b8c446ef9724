// The text corpus reader: any bytes as a corpus file, windows and the
// validation split over it, and a data-position state (the second part of
// the input) restored as --resume does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.hpp"
#include "mantissa/data/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mantissa;
  const auto parts = fuzz::split(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string path = fuzz::write("corpus.txt", parts[0]);
  FUZZ_EXPECT_REFUSAL({
    const data::TextCorpus corpus = data::TextCorpus::load(path);
    const int64_t T = 1 + static_cast<int64_t>(parts[0].empty() ? 0 : static_cast<uint8_t>(parts[0][0]) % 16);
    data::TextWindows windows(corpus, 2, T, 7);
    if (parts.size() > 1) windows.load_state(std::string(parts[1]));
    (void)windows.next();
    data::TextValidation val(corpus, 3, T, parts.size() > 2 ? static_cast<int64_t>(parts[2].size()) : 0);
    for (int64_t i = 0; i < val.num_batches() && i < 4; ++i) (void)val.batch(i);
  });
  return 0;
}
