// BERT encoder with the masked-language-model head (Hugging Face
// BertForMaskedLM layout): word + token-type + position embeddings summed and
// layer-normed, blocks of bidirectional multi-head attention over the
// non-padding keys and a GELU MLP (post-norm as the original BERT, pre-norm
// as an option, which adds a final LayerNorm), and the MLM head: dense, GELU,
// LayerNorm, then the decoder tied to the word embeddings with its own bias.
// Linear weights are [out, in] with biases.
//
// Tokens: a byte-level model (built here) has the bytes 0..byte_vocab-1,
// then [CLS], [SEP], [MASK] and [PAD] (ids byte_vocab + 0..3). A model from
// a Hugging Face config.json has its vocab_size and pad_token_id, and the
// [CLS], [SEP] and [MASK] ids its tokenizer files name (bert_special_ids;
// kept in config.json's "mantissa" section when mantissa saves it). An input
// row is [CLS] A [SEP] (B [SEP]) [PAD]...: padding only at the end; token
// type 0 up to the first [SEP], 1 after it (the padding takes type 0; every
// type is 0 when type_vocab_size is 1). Both the key-padding mask and the
// token types are read from the ids, so a batch is just ids and targets (-1:
// not predicted).
//
// The function: GELU as hidden_act says (transformers' "gelu" is the exact
// erf form, "gelu_new" / "gelu_pytorch_tanh" the tanh approximation, which
// byte-level models use), every LayerNorm with layer_norm_eps. Dropout is
// not implemented: a config's rates are read, evaluation ignores them, and
// training needs them set to 0 (set_dropout; train --init-from: --dropout 0).
//
// Initialisation: one Rng(seed) draws, in parameter order, N(0, 0.02) for
// every matrix and table (transformers' initializer_range); LayerNorm gains 1,
// shifts and biases 0. Weight decay on the matrices and the word table.
//
// Unit-scaled (config.unit.enabled), from the same forward code, following
// the unit-scaling paper's BERT: weights N(0, 1) (the token-type table 0: its
// two rows would be a component shared by every key of a segment, which the
// attention's average does not shrink); the three embeddings summed
// with equal weights 3^-1/2, each table's gradient scaled by the embedding
// rule; residual_split/add with tau_attn/tau_mlp around each branch (post-norm:
// the LayerNorm follows the weighted add); linears by unit::linear; the
// scaled softmax of u-muP attention with the sequence length taken as the mean
// number of non-padding tokens of the batch (not the padded length); batch
// sizes of the weight-gradient rules count only the non-padding tokens; scaled
// GELUs; the MLM head's rows gathered with gradient x sqrt(non-padding tokens
// / predicted rows), so that the scattered gradient is unit over the tokens; a
// unit readout; the tied word table's two gradients (lookup and decoder) each
// scaled by 2^-1/2 so that their sum stays unit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mantissa/autograd/tape.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/unit/config.hpp"

namespace mantissa::nn {

class Rng;

struct BertConfig {
  int64_t byte_vocab = 256;  // byte-level: ordinary tokens; the four special ids follow them
  // From a Hugging Face config (vocab_size > 0): the vocabulary and special
  // ids, -1 where unknown (pad_token always known: transformers' default 0).
  int64_t vocab_size = 0;
  int32_t pad_token = 0, cls_token = -1, sep_token = -1, mask_token = -1;
  int64_t context = 128;     // max_position_embeddings
  int64_t layers = 4;
  int64_t d_model = 256;
  int64_t heads = 4;
  int64_t hidden = 0;  // intermediate size; 0: 4 d_model
  int64_t type_vocab = 2;
  bool pre_norm = false;
  kernels::GeluForm gelu_form = kernels::GeluForm::tanh;
  double layer_norm_eps = 1e-5;  // applied as the float nearest
  double hidden_dropout = 0, attention_dropout = 0;  // read, not applied (see the top)
  uint64_t seed = 0;
  unit::UnitConfig unit;

  bool byte_level() const { return vocab_size == 0; }
  int64_t vocab() const { return byte_level() ? byte_vocab + 4 : vocab_size; }
  int32_t cls_id() const { return byte_level() ? static_cast<int32_t>(byte_vocab) : cls_token; }
  int32_t sep_id() const { return byte_level() ? static_cast<int32_t>(byte_vocab + 1) : sep_token; }
  int32_t mask_id() const { return byte_level() ? static_cast<int32_t>(byte_vocab + 2) : mask_token; }
  int32_t pad_id() const { return byte_level() ? static_cast<int32_t>(byte_vocab + 3) : pad_token; }
  int64_t ffn() const { return hidden > 0 ? hidden : 4 * d_model; }
  void validate() const;        // throws std::invalid_argument naming the field
  std::string to_json() const;  // transformers BertConfig keys (+ "mantissa" extras)
  static BertConfig from_json(const std::string& text);
};

// The [CLS], [SEP] and [MASK] ids (and [PAD]'s, to check config.json's
// pad_token_id) a transformers model directory's tokenizer files name, added
// to a BERT config.json text that does not hold them (other texts come back
// unchanged): the tokens' names from special_tokens_map.json or
// tokenizer_config.json (cls_token, sep_token, mask_token, pad_token; a
// string or {"content": ...}), else BERT's [CLS], [SEP], [MASK], [PAD]; their
// ids from tokenizer.json (added_tokens, then the model's vocab), else
// tokenizer_config.json's added_tokens_decoder, else vocab.txt (line number).
// An id not found stays unknown: a run that needs it (masked-LM data) says
// so. Throws std::invalid_argument naming the file for malformed JSON and
// when [PAD]'s id disagrees with pad_token_id.
std::string bert_config_with_special_ids(const std::string& config_json, const std::string& dir);

// What the encoder reads from ids i32 [B, T] beside the tokens: the number of
// non-padding tokens per row and the token types. Throws std::invalid_argument
// (naming row and position) for an id outside the vocabulary, a row not
// starting with [CLS] or [PAD] before a non-padding token.
struct BertInputs {
  Tensor key_len;      // i32 [B]
  Tensor token_types;  // i32 [B, T]
  Tensor positions;    // i32 [B, T], 0..T-1 in every row
  int64_t tokens = 0;  // sum of key_len
};
BertInputs bert_inputs(const BertConfig& c, const Tensor& ids);

class Bert : public Model {
 public:
  explicit Bert(const BertConfig& config);
  Bert(const Bert&) = delete;
  Bert& operator=(const Bert&) = delete;

  std::string base_prefix() const override { return "bert."; }
  // Non-empty while the config's dropout rates are not 0.
  std::string cannot_train() const override;
  // p must be 0: sets both rates to 0 (dropout is not implemented).
  void set_dropout(float p) override;
  // inputs: ids i32 [B, T]; targets i32 [B, T], the original token at the
  // predicted positions and -1 elsewhere. Only the predicted positions go
  // through the MLM head.
  LossSum forward_backward(const Batch& batch, float grad_scale) override;
  // LossSum::correct counts the predicted positions whose arg-max logit is the target.
  LossSum evaluate(const Batch& batch) override;
  std::string config_json() const override { return config_.to_json(); }
  std::string kind() const override { return "bert"; }
  Task task() const override { return Task::masked_language_model; }
  int64_t context_length() const override { return config_.context; }
  int64_t blocks() const override { return config_.layers; }
  const unit::UnitConfig& unit() const override { return config_.unit; }
  const BertConfig& config() const { return config_; }

  // MLM logits on the given tape: [R, V] for the rows (i32 [R], indices into
  // the B*T positions) when given, else [B, T, V] for every position.
  autograd::Var forward(autograd::Tape& tape, const Tensor& ids, const Tensor* rows = nullptr);
  // logits [B, T, V] without recording anything.
  Tensor logits(const Tensor& ids) override;

 private:
  struct Linear {
    autograd::Parameter *w = nullptr, *b = nullptr;
  };
  struct Norm {
    autograd::Parameter *w = nullptr, *b = nullptr;
  };
  struct Block {
    Linear q, k, v, o, fc, out;
    Norm ln_attn, ln_mlp;
  };
  struct Pass;  // the per-forward facts (sizes, scales) block() reads
  Linear linear(const std::string& name, int64_t in, int64_t out, int block, double std, Rng& rng);
  Norm norm(const std::string& name, int block);
  autograd::Var block(autograd::Tape& t, const Pass& p, const Block& b, autograd::Var x, size_t layer);
  // The ops standard or unit-scaled; `batch` counts the rows the weight gradients sum over.
  autograd::Var dense(autograd::Tape& t, const autograd::Var& x, const Linear& l, const unit::Scales& s);
  void cancel_gelu_mean(const Linear& out, int64_t C, int64_t F);
  autograd::Var layer_norm(autograd::Tape& t, const autograd::Var& x, const Norm& n, int64_t batch);
  autograd::Var gelu(autograd::Tape& t, autograd::Var x);
  // Unit: the GELU's scales (one rule, read by the op, its branch and the bias init).
  unit::Scales gelu_scales() const;

  BertConfig config_;
  autograd::Parameter *word_ = nullptr, *position_ = nullptr, *type_ = nullptr;
  Norm ln_embed_, ln_final_, ln_head_;  // ln_final_: pre-norm only
  Linear head_dense_;
  autograd::Parameter* decoder_bias_ = nullptr;
  std::vector<Block> blocks_;
};

}  // namespace mantissa::nn
