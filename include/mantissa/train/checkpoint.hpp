// Saved models (for users: Hugging Face layout) and resumable checkpoints
// (for the trainer). A checkpoint directory is a superset of a model
// directory, so `mantissa eval --checkpoint DIR` reads either.
//
// Model directory:
//   model.safetensors   parameters under their names (GPT: Hugging Face GPT-2
//                       names; the tied lm_head is not stored, as in HF)
//   config.json         model.config_json()
// Checkpoint directory adds:
//   optimizer.safetensors  optimizer state tensors + extra tensors
//                          ("extra.<name>"), hyper-parameters in __metadata__
//   optimizer.json         optimizer.state_json()
//   trainer_state.json     the trainer's string (step, RNG, data position,
//                          loss scaler, ...)
//   COMPLETE               manifest: {"format":"mantissa-checkpoint","version":1,
//                          "files":{name:{"bytes":n,"crc32":c}}}
//
// Atomicity: everything is written and fsync'ed into a fresh sibling
// directory DIR.tmp-<pid>-<n> (marked .mantissa-partial until complete),
// COMPLETE last; then the new directory is swapped with DIR in one step
// (renameat2 RENAME_EXCHANGE; where the file system lacks it, DIR is first
// renamed to DIR.old-<pid>-<n>, which load_checkpoint falls back to if DIR
// is missing) and the old one's checkpoint files removed.
// Safety: DIR must be missing, empty, or a mantissa checkpoint (COMPLETE
// manifest), else the save is refused before anything is written; removal
// only ever unlinks the checkpoint file names above, in directories that
// are checkpoints or carry the partial marker.
// The checkpoint a save replaces is kept as DIR.prev when it still verifies
// (sizes and CRC-32) and DIR.prev is missing or itself a mantissa checkpoint
// (a link, a file or a user's directory there is left alone and nothing is
// kept); choose_checkpoint falls back to it when DIR is corrupt.
// A process killed at any point leaves a loadable previous (or new)
// checkpoint. Loading verifies COMPLETE, every file's size and CRC-32, then
// parses; any mismatch is refused with a message naming the file.
#pragma once

#include <map>
#include <string>

#include "mantissa/io/safetensors.hpp"
#include "mantissa/nn/module.hpp"
#include "mantissa/optim/optimizer.hpp"

namespace mantissa::train {

// Writes model.safetensors + config.json into dir (created if needed; each
// file atomically).
void save_model(const std::string& dir, nn::Model& model);
// Loads model.safetensors into the model's parameters; every parameter must
// be present with its exact shape and dtype, and no unknown tensor may be in
// the file. Throws FormatError naming the file and tensor.
void load_model_weights(const std::string& dir, nn::Model& model);
// Contents of dir/config.json (throws FormatError if missing or not JSON).
std::string read_model_config(const std::string& dir);

struct CheckpointData {
  std::string trainer_state;                    // as given to save_checkpoint
  std::map<std::string, Tensor> extra_tensors;  // as given to save_checkpoint
};

// Throws std::invalid_argument naming flag and dir unless a checkpoint can
// be saved there: dir missing, empty or a mantissa checkpoint (not a link),
// and its parent writable. Run before training so nothing is lost later.
void check_checkpoint_target(const std::string& dir, const std::string& flag);
// optimizer may be null (no optimizer state saved). extra_tensors: anything
// else the trainer needs bit-exactly (e.g. working-format weights).
void save_checkpoint(const std::string& dir, nn::Model& model, const optim::Optimizer* optimizer,
                     const std::string& trainer_state,
                     const std::map<std::string, Tensor>& extra_tensors = {});
// Verifies and loads model weights and optimizer state in place and returns
// the trainer's state. If the checkpoint holds optimizer state but optimizer
// is null, it is ignored; if optimizer is non-null the state must be there.
CheckpointData load_checkpoint(const std::string& dir, nn::Model& model, optim::Optimizer* optimizer);
struct CheckpointChoice {
  std::string dir;      // the directory to load: DIR (or DIR.old-*), or DIR.prev
  std::string warning;  // empty, or what was wrong with DIR and which step DIR.prev holds
};
// Verifies DIR before a load (manifest, sizes, CRC-32, finite weights and
// optimizer state). If it fails and DIR.prev is a mantissa checkpoint that
// verifies, returns DIR.prev with a warning naming DIR's problem; if both
// fail, throws FormatError naming both. model_dir_ok: a DIR without a
// manifest and no DIR.prev is returned as is (a saved model directory).
CheckpointChoice choose_checkpoint(const std::string& dir, bool model_dir_ok);
// True if dir (or its DIR.old-* fallback) holds a COMPLETE checkpoint.
bool checkpoint_exists(const std::string& dir);

}  // namespace mantissa::train
