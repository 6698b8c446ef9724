// A tokenizer.json from outside (`mantissa tokenize --tokenizer FILE`) and a
// text to encode with it: the input is the JSON, the separator line, then the
// text. Parsed, encoded and written as llm.c token bytes, as the tokenize
// command does; the ids must lie below the tokenizer's vocabulary size.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_util.hpp"
#include "mantissa/data/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mantissa;
  const auto parts = fuzz::split(std::string_view(reinterpret_cast<const char*>(data), size));
  if (parts.size() != 2) return 0;
  FUZZ_EXPECT_REFUSAL({
    data::Tokenizer tok = data::Tokenizer::parse(parts[0], "tokenizer.json");
    const std::vector<uint32_t> ids = tok.encode(parts[1]);
    // Twice: the second pass reads the models' word caches.
    if (tok.encode(parts[1]) != ids) std::abort();
    for (uint32_t id : ids)
      if (id >= tok.vocab_size()) std::abort();
    if (!ids.empty()) (void)data::llmc_token_bytes(ids, tok.vocab_size());
    (void)tok.kind();
  });
  return 0;
}
