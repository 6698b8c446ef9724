// A token file from outside (`--data FILE.bin` or a directory of splits):
// the first byte picks the layout (one llm.c file, or a nanoGPT directory
// whose train.bin and val.bin are the two halves of the input), the rest is
// the file's bytes. Loaded, checked against a vocabulary of 2^(byte % 17)
// and windowed, as `mantissa train` does before its first step.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>

#include "fuzz_util.hpp"
#include "mantissa/data/text.hpp"
#include "mantissa/data/tokens.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mantissa;
  if (size < 2) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 2, size - 2);
  const int64_t vocab = int64_t{1} << (data[1] % 17);
  std::string path;
  if (data[0] % 2 == 0) {
    path = fuzz::write("tokens.bin", bytes);
  } else {
    const std::filesystem::path dir = fuzz::scratch() / "nano";
    std::filesystem::create_directories(dir);
    fuzz::write("nano/train.bin", bytes.substr(0, bytes.size() / 2));
    fuzz::write("nano/val.bin", bytes.substr(bytes.size() / 2));
    path = dir.string();
  }
  FUZZ_EXPECT_REFUSAL({
    auto corpus = std::make_shared<const data::TokenCorpus>(data::TokenCorpus::load(path));
    corpus->check_vocab(vocab);
    corpus->check_seq_len(4);
    data::TextWindows windows(corpus, vocab, 2, 4, 1);
    (void)windows.next();
    (void)corpus->summary();
  });
  return 0;
}
