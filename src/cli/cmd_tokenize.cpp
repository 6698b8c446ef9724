// `mantissa tokenize --tokenizer tokenizer.json IN.txt OUT.bin`: the ids of a
// UTF-8 text file under a Hugging Face tokenizer.json (byte-level BPE as
// GPT-2, WordPiece as BERT; see mantissa/data/tokenizer.hpp) into an llm.c
// token file, which `train --data OUT.bin --vocab-size N` reads. The whole
// file is one text, encoded without added special tokens; OUT is checked
// before the work and replaced by a rename after it (data::tokenize_file).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.hpp"
#include "mantissa/data/tokenizer.hpp"

namespace mantissa::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer, input, output;
  bool quiet = false;
};

void tokenize_command(const TokenizeArgs& a) {
  const data::TokenizeSummary s = data::tokenize_file({a.tokenizer, a.input, a.output}, {"--tokenizer", "IN", "OUT"});
  if (a.quiet) return;
  const double seconds = s.encode_seconds;
  std::printf("%s: %zu tokens from %zu bytes (%s, vocabulary %llu, llm.c %s ids); %.2f MB/s (%.3f s, tokenizer loaded in %.3f s)\n",
              a.output.c_str(), s.tokens, s.text_bytes, s.kind.c_str(), static_cast<unsigned long long>(s.vocab_size),
              s.vocab_size <= 65536 ? "uint16" : "uint32",
              seconds > 0 ? static_cast<double>(s.text_bytes) / 1e6 / seconds : 0.0, seconds, s.load_seconds);
}

Registrar reg(20, [](CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "a text file into an llm.c token file, through a Hugging Face tokenizer.json");
  auto args = std::make_shared<TokenizeArgs>();
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json (BPE or WordPiece; other components are refused)")
      ->required();
  cmd->add_option("IN", args->input, "UTF-8 text, tokenized whole (at most 1 GiB)")->required();
  cmd->add_option("OUT", args->output, "the llm.c token file to write (a new file, or one mantissa may replace)")
      ->required();
  cmd->add_flag("--quiet,-q", args->quiet, "print nothing on success");
  cmd->callback([args] { tokenize_command(*args); });
});

}  // namespace
}  // namespace mantissa::cli
