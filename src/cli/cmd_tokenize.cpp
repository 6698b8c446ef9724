// `mantissa tokenize --tokenizer tokenizer.json IN.txt OUT.bin`: the ids of a
// UTF-8 text file under a Hugging Face tokenizer.json (byte-level BPE as
// GPT-2, WordPiece as BERT; see mantissa/data/tokenizer.hpp) into an llm.c
// token file, which `train --data OUT.bin --vocab-size N` reads. The whole
// file is one text, encoded without added special tokens; OUT is checked
// before the work and replaced by a rename after it.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.hpp"
#include "mantissa/data/tokenizer.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/io/untrusted.hpp"

namespace mantissa::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer, input, output;
  bool quiet = false;
};

void tokenize_command(const TokenizeArgs& a) {
  io::refuse_output_over_input(a.output, "OUT", {{"IN", a.input}, {"--tokenizer", a.tokenizer}});
  data::check_token_output(a.output);
  const auto t0 = std::chrono::steady_clock::now();
  data::Tokenizer tokenizer = data::Tokenizer::load(a.tokenizer);
  std::string text;
  try {
    text = io::read_bounded(a.input, data::kMaxTokenizeInputBytes);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("IN: ") + e.what());
  }
  const auto t1 = std::chrono::steady_clock::now();
  const std::vector<uint32_t> ids = tokenizer.encode(text, "IN '" + a.input + "'");
  const auto t2 = std::chrono::steady_clock::now();
  data::write_token_file(a.output, ids, tokenizer.vocab_size());
  if (a.quiet) return;
  const double seconds = std::chrono::duration<double>(t2 - t1).count();
  const double load = std::chrono::duration<double>(t1 - t0).count();
  std::printf("%s: %zu tokens from %zu bytes (%s, vocabulary %llu, llm.c %s ids); %.2f MB/s (%.3f s, tokenizer loaded in %.3f s)\n",
              a.output.c_str(), ids.size(), text.size(), tokenizer.kind().c_str(),
              static_cast<unsigned long long>(tokenizer.vocab_size()), tokenizer.vocab_size() <= 65536 ? "uint16" : "uint32",
              seconds > 0 ? static_cast<double>(text.size()) / 1e6 / seconds : 0.0, seconds, load);
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
