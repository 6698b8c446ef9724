// `mantissa eval --checkpoint DIR [--data PATH]`: validation loss of a saved
// model (a model directory or a training checkpoint): bits per character on
// byte-level text, nats and bits per token on token files.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "mantissa/data/idx.hpp"
#include "mantissa/data/mlm.hpp"
#include "mantissa/data/text.hpp"
#include "mantissa/data/tokens.hpp"
#include "mantissa/train/checkpoint.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/bert.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/io/untrusted.hpp"
#include "mantissa/train/finite.hpp"
#include "mantissa/train/session.hpp"

namespace mantissa::cli {
namespace {

struct EvalArgs {
  std::string checkpoint;
  std::string data;
  int64_t batch_size = 16;
  int64_t seq_len = 0;  // 0: the model's context
  int64_t max_batches = 0;
  int64_t threads = 0;
};

std::string model_kind(const std::string& config_json, const std::string& dir) {
  io::parse_json(config_json, dir + "/config.json");  // names the file when it is not JSON
  const std::string kind = nn::detect_model_kind(config_json);
  if (kind.empty()) throw UsageError(dir + "/config.json describes none of the models (" + nn::model_kind_names() + ")");
  return kind;
}

void eval_command(const EvalArgs& a) {
  if (a.batch_size <= 0) throw UsageError("--batch-size must be positive");
  if (a.batch_size > (1 << 20)) throw UsageError("--batch-size " + std::to_string(a.batch_size) + " is too large (at most 2^20)");
  if (a.seq_len < 0 || a.max_batches < 0 || a.threads < 0)
    throw UsageError("--seq-len, --max-batches and --threads must not be negative");
  if (a.threads > 0) kernels::set_num_threads(a.threads);
  // A corrupt checkpoint falls back to the one its last save replaced.
  const train::CheckpointChoice chosen = train::choose_checkpoint(a.checkpoint, true);
  if (!chosen.warning.empty()) std::fprintf(stderr, "%s\n", chosen.warning.c_str());
  const std::string& checkpoint = chosen.dir;
  const std::string cfg = nn::bert_config_with_special_ids(train::read_model_config(checkpoint), checkpoint);
  const std::string kind = model_kind(cfg, checkpoint);
  auto model = train::model_from_config(kind, cfg);
  train::load_model_weights(checkpoint, *model);
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const autograd::Parameter* p : model->parameters()) weights.emplace_back(p->name, p->value);
  if (const std::string bad = train::first_non_finite(weights); !bad.empty())
    throw UsageError(checkpoint + ": weight " + bad + " holds non-finite values (NaN or infinity); refused");
  const std::string path = a.data.empty() ? train::default_data_path(kind) : a.data;
  double sum = 0;
  int64_t count = 0;
  const bool tokens = model->task() != nn::Model::Task::classifier && data::is_token_data(path);
  if (model->task() == nn::Model::Task::language_model && !tokens && data::model_vocab(*model) != data::kByteVocab)
    throw UsageError(checkpoint + " holds a model of vocabulary " + std::to_string(data::model_vocab(*model)) +
                     ", not the 256 bytes of --data " + path + ": pass the token data it was trained on");
  if (model->task() == nn::Model::Task::masked_language_model) {
    const int64_t T = a.seq_len > 0 ? a.seq_len : model->context_length();
    if (T > model->context_length())
      throw UsageError("--seq-len " + std::to_string(T) + " exceeds the model's context " +
                       std::to_string(model->context_length()));
    const data::MlmTokens tok = data::mlm_tokens(*model, tokens);
    std::unique_ptr<data::TextCorpus> corpus;  // outlive val
    std::unique_ptr<data::TokenCorpus> token_corpus;
    std::unique_ptr<data::MlmValidation> val;
    if (tokens) {
      token_corpus = std::make_unique<data::TokenCorpus>(data::TokenCorpus::load(path));
      val = std::make_unique<data::MlmValidation>(*token_corpus, a.batch_size, T, a.max_batches, tok);
    } else {
      corpus = std::make_unique<data::TextCorpus>(data::TextCorpus::load(path));
      val = std::make_unique<data::MlmValidation>(*corpus, a.batch_size, T, a.max_batches, tok);
    }
    int64_t correct = 0;
    for (int64_t i = 0; i < val->num_batches(); ++i) {
      const auto r = model->evaluate(val->batch(i));
      sum += r.sum;
      count += r.count;
      correct += r.correct;
    }
    if (count == 0) throw UsageError(path + ": the validation split has no masked targets");
    const double loss = sum / static_cast<double>(count);
    const double accuracy = 100.0 * static_cast<double>(correct) / static_cast<double>(count);
    if (tokens)
      std::printf("checkpoint %s\ndata %s (%s; %ld masked targets)\nval_loss %.4f nats/token  %.4f bits/masked token  "
                  "masked accuracy %.2f%%\n",
                  a.checkpoint.c_str(), path.c_str(), token_corpus->summary().c_str(), static_cast<long>(count), loss,
                  loss / std::log(2.0), accuracy);
    else
      std::printf("checkpoint %s\ndata %s (validation: last %ld bytes, %ld masked targets)\nval_loss %.4f nats  "
                  "%.4f bits/masked char  masked accuracy %.2f%%\n",
                  a.checkpoint.c_str(), path.c_str(), static_cast<long>(corpus->val_size()), static_cast<long>(count),
                  loss, loss / std::log(2.0), accuracy);
  } else if (model->task() == nn::Model::Task::language_model) {
    const int64_t context = model->context_length();
    const int64_t T = a.seq_len > 0 ? a.seq_len : context;
    if (T > context)
      throw UsageError("--seq-len " + std::to_string(T) + " exceeds the model's context " + std::to_string(context));
    // The corpus outlives val (which points into it).
    std::shared_ptr<const data::TokenCorpus> token_corpus;
    std::unique_ptr<data::TextCorpus> corpus;
    std::unique_ptr<data::TextValidation> val;
    if (tokens) {
      token_corpus = std::make_shared<const data::TokenCorpus>(data::TokenCorpus::load(path));
      val = std::make_unique<data::TextValidation>(token_corpus, data::model_vocab(*model), a.batch_size, T,
                                                   a.max_batches);
    } else {
      corpus = std::make_unique<data::TextCorpus>(data::TextCorpus::load(path));
      val = std::make_unique<data::TextValidation>(*corpus, a.batch_size, T, a.max_batches);
    }
    for (int64_t i = 0; i < val->num_batches(); ++i) {
      const auto r = model->evaluate(val->batch(i));
      sum += r.sum;
      count += r.count;
    }
    if (count == 0) throw UsageError(path + ": the validation split has no targets");
    const double loss = sum / static_cast<double>(count);
    if (tokens)
      std::printf("checkpoint %s\ndata %s (%s; %ld targets)\nval_loss %.4f nats/token  val_bits_per_token %.4f\n",
                  a.checkpoint.c_str(), path.c_str(), token_corpus->summary().c_str(), static_cast<long>(count), loss,
                  loss / std::log(2.0));
    else
      std::printf(
          "checkpoint %s\ndata %s (validation: last %ld bytes, %ld targets)\nval_loss %.4f nats  val_bpc %.4f bits/char\n",
          a.checkpoint.c_str(), path.c_str(), static_cast<long>(corpus->val_size()), static_cast<long>(count), loss,
          loss / std::log(2.0));
  } else {
    const auto test = data::load_fashion_mnist(path, "test");
    data::SequentialBatches val(test, a.batch_size);
    int64_t correct = 0;
    for (int64_t i = 0; i < val.num_batches(); ++i) {
      const nn::Batch b = val.batch(i);
      const auto r = model->evaluate(b);
      sum += r.sum;
      count += r.count;
      const Tensor logits = model->logits(b.inputs);
      const int64_t rows = logits.dim(0), classes = logits.dim(1);
      for (int64_t row = 0; row < rows; ++row) {
        const float* l = logits.f32() + row * classes;
        int64_t best = 0;
        for (int64_t k = 1; k < classes; ++k)
          if (l[k] > l[best]) best = k;
        correct += best == b.targets.data<int32_t>()[row];
      }
    }
    if (count == 0) throw UsageError(path + ": the test split has no examples");
    std::printf("checkpoint %s\ndata %s (test split, %ld examples)\nval_loss %.4f nats  accuracy %.2f%%\n",
                a.checkpoint.c_str(), path.c_str(), static_cast<long>(count), sum / static_cast<double>(count),
                100.0 * static_cast<double>(correct) / static_cast<double>(count));
  }
}

Registrar reg(31, [](CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "eval", "validation loss of a saved model (bits per character, or per token on token data)");
  auto a = std::make_shared<EvalArgs>();
  cmd->add_option("--checkpoint", a->checkpoint, "model or checkpoint directory (written by train --save)")->required();
  cmd->add_option("--data", a->data,
                  "text file or token files (gpt, llama) or Fashion-MNIST directory (mlp); default corpus if empty");
  cmd->add_option("--batch-size", a->batch_size, "windows per batch")->check(exact_integer<int64_t>());
  cmd->add_option("--seq-len", a->seq_len, "tokens per window (default: the model's context)")->check(exact_integer<int64_t>());
  cmd->add_option("--max-batches", a->max_batches, "evaluate only the first N batches (0: the whole split)")->check(exact_integer<int64_t>());
  cmd->add_option("--threads", a->threads, "compute threads (0: default)")->check(exact_integer<int64_t>());
  cmd->callback([a] { eval_command(*a); });
});

}  // namespace
}  // namespace mantissa::cli
