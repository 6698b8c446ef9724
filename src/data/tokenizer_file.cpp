// tokenize_file: a text file through a tokenizer.json into an llm.c token
// file, as `mantissa tokenize` and mantissa.data.tokenize do it.
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/data/source.hpp"
#include "mantissa/data/tokenizer.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/io/untrusted.hpp"

namespace mantissa::data {

TokenizeSummary tokenize_file(const TokenizeFiles& paths, const TokenizeFiles& names) {
  try {
    io::refuse_output_over_input(paths.output, names.output,
                                 {{names.input, paths.input}, {names.tokenizer, paths.tokenizer}});
  } catch (const std::invalid_argument& e) {
    throw DataError(e.what());
  }
  check_token_output(paths.output);
  const auto t0 = std::chrono::steady_clock::now();
  Tokenizer tokenizer = Tokenizer::load(paths.tokenizer);
  std::string text;
  try {
    text = io::read_bounded(paths.input, kMaxTokenizeInputBytes);
  } catch (const std::invalid_argument& e) {
    throw DataError(names.input + ": " + e.what());
  }
  const auto t1 = std::chrono::steady_clock::now();
  const std::vector<uint32_t> ids = tokenizer.encode(text, names.input + " '" + paths.input + "'");
  const auto t2 = std::chrono::steady_clock::now();
  write_token_file(paths.output, ids, tokenizer.vocab_size());
  TokenizeSummary s;
  s.tokens = ids.size();
  s.text_bytes = text.size();
  s.vocab_size = tokenizer.vocab_size();
  s.kind = tokenizer.kind();
  s.load_seconds = std::chrono::duration<double>(t1 - t0).count();
  s.encode_seconds = std::chrono::duration<double>(t2 - t1).count();
  return s;
}

}  // namespace mantissa::data
