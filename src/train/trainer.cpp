// One optimizer step: draw K micro-batches, count their targets, run the
// scaled forward/backward of each with grad_scale = loss_scale / total, then
// hand over to Amp::step (unscale once, skip if non-finite, clip, update,
// round). The schedule position is the number of applied updates.
#include "mantissa/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "mantissa/io/checkpoint.hpp"

namespace mantissa::train {

using nlohmann::json;

namespace {
constexpr const char* kStateFormat = "mantissa-trainer-state";
constexpr int kStateVersion = 1;
constexpr const char* kMasterPrefix = "master.";
}  // namespace

Trainer::Trainer(nn::Model& model, optim::Optimizer& optimizer, data::TrainSource& train,
                 const data::EvalSource* val, const amp::Recipe& recipe, TrainerOptions options)
    : model_(model),
      optimizer_(optimizer),
      train_(train),
      val_(val),
      options_(options),
      amp_(model, optimizer, recipe, options.amp) {
  if (options_.grad_accum < 1) throw std::invalid_argument("grad_accum must be >= 1");
  options_.schedule.validate();
}

StepMetrics Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<nn::Batch> micro;
  micro.reserve(static_cast<size_t>(options_.grad_accum));
  int64_t total = 0, tokens = 0;
  for (int64_t k = 0; k < options_.grad_accum; ++k) {
    micro.push_back(train_.next());
    total += amp::count_targets(micro.back());
    tokens += micro.back().targets.numel();
  }
  StepMetrics m;
  const double lr = options_.schedule.at(amp_.updates());
  double loss_sum = 0;
  for (const nn::Batch& b : micro) loss_sum += amp_.backward(b, total).sum;
  const amp::AmpStepResult r = amp_.step(lr);
  ++step_;
  tokens_seen_ += tokens;
  m.step = step_;
  m.loss = loss_sum / static_cast<double>(total);
  m.lr = lr;
  m.tokens = tokens;
  m.targets = total;
  m.loss_scale = r.loss_scale;
  m.skipped = r.skipped;
  m.grad_norm = r.grad_norm;
  m.grad_stats_json = r.grad_stats_json;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.tokens_per_s = m.seconds > 0 ? static_cast<double>(tokens) / m.seconds : 0;
  return m;
}

EvalMetrics Trainer::evaluate() const {
  EvalMetrics e;
  e.step = step_;
  if (!val_) throw std::logic_error("no validation data");
  double sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < val_->num_batches(); ++i) {
    const nn::LossSum r = model_.evaluate(val_->batch(i));
    sum += r.sum;
    count += r.count;
  }
  if (count == 0) throw std::invalid_argument("the validation set has no targets");
  e.val_loss = sum / static_cast<double>(count);
  e.val_bpc = e.val_loss / std::log(2.0);
  e.targets = count;
  return e;
}

std::string Trainer::state_json() const {
  json j = {{"format", kStateFormat},
            {"version", kStateVersion},
            {"step", step_},
            {"updates", amp_.updates()},
            {"tokens_seen", tokens_seen_},
            {"seed", options_.amp.seed},
            {"grad_accum", options_.grad_accum},
            {"recipe", json::parse(amp::recipe_to_json(amp_.recipe()))},
            {"loss_scaler", json::parse(amp_.scaler().state_json())},
            {"data", json::parse(train_.state_json())},
            {"model_config", model_.config_json()},
            {"model_kind", model_.kind()}};
  return j.dump();
}

void Trainer::load_state_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("trainer_state.json does not parse: ") + e.what());
  }
  try {
    if (j.at("format") != kStateFormat || j.at("version") != kStateVersion)
      throw std::invalid_argument("trainer_state.json is not a mantissa trainer state of version 1");
    if (j.at("model_kind").get<std::string>() != model_.kind() ||
        json::parse(j.at("model_config").get<std::string>()) != json::parse(model_.config_json()))
      throw std::invalid_argument("the checkpoint's model (" + j.at("model_config").get<std::string>() +
                                  ") differs from this run's model (" + model_.config_json() + ")");
    const std::string saved_recipe = j.at("recipe").dump();
    if (json::parse(saved_recipe) != json::parse(amp::recipe_to_json(amp_.recipe())))
      throw std::invalid_argument("the checkpoint was trained with recipe " + saved_recipe +
                                  ", this run uses " + amp::recipe_to_json(amp_.recipe()));
    if (j.at("seed").get<uint64_t>() != options_.amp.seed)
      throw std::invalid_argument("the checkpoint was trained with --seed " + j.at("seed").dump() +
                                  "; resume with the same seed");
    if (j.at("grad_accum").get<int64_t>() != options_.grad_accum)
      throw std::invalid_argument("the checkpoint was trained with --grad-accum " + j.at("grad_accum").dump());
    // Counters from a file: negative or inconsistent ones are refused
    // (updates count applied steps, so never exceed the step).
    const auto step = j.at("step").get<int64_t>(), tokens = j.at("tokens_seen").get<int64_t>(),
               updates = j.at("updates").get<int64_t>();
    if (step < 0 || tokens < 0 || updates < 0 || updates > step)
      throw std::invalid_argument("trainer_state.json: step " + std::to_string(step) + ", tokens_seen " +
                                  std::to_string(tokens) + ", updates " + std::to_string(updates) +
                                  " are out of range (non-negative, updates <= step)");
    step_ = step;
    tokens_seen_ = tokens;
    amp_.set_updates(updates);
    amp_.scaler().load_state_json(j.at("loss_scaler").dump());
    train_.load_state(j.at("data").dump());
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("trainer_state.json: ") + e.what());
  }
}

void Trainer::save(const std::string& dir) {
  std::map<std::string, Tensor> extra;
  // Master copies (when the recipe keeps them) are saved beside the working
  // weights: the model file holds what the model computes with.
  for (const auto& [name, ptr] : amp_.master_weights().masters()) {
    nn::Parameter* p = nullptr;
    for (nn::Parameter* q : amp_.parameters())
      if (q->name == name) p = q;
    Tensor t = Tensor::empty(p->value.shape(), DType::f32, MemoryKind::workspace);
    std::copy(ptr, ptr + t.numel(), t.f32());
    extra[kMasterPrefix + name] = t;
  }
  io::save_checkpoint(dir, model_, &optimizer_, state_json(), extra);
}

void Trainer::resume(const std::string& dir) {
  io::CheckpointData data = io::load_checkpoint(dir, model_, &optimizer_);
  load_state_json(data.trainer_state);
  const auto masters = amp_.master_weights().masters();
  for (const auto& [name, ptr] : masters) {
    const auto it = data.extra_tensors.find(kMasterPrefix + name);
    if (it == data.extra_tensors.end())
      throw std::invalid_argument("checkpoint " + dir + " lacks the master copy of " + name);
    const Tensor& t = it->second;
    const nn::Parameter* p = nullptr;
    for (nn::Parameter* q : amp_.parameters())
      if (q->name == name) p = q;
    if (t.dtype() != DType::f32 || !p || t.shape() != p->value.shape())
      throw std::invalid_argument("checkpoint " + dir + ": master copy of " + name + " is " + dtype_name(t.dtype()) +
                                  " " + shape_str(t.shape()) + " but f32 " +
                                  (p ? shape_str(p->value.shape()) : std::string("?")) + " is expected");
    amp_.master_weights().load_master(name, t.f32(), t.numel());
  }
  for (nn::Parameter* p : amp_.parameters()) ++p->version;  // cached casts must refresh
  model_.zero_grad();
}

}  // namespace mantissa::train
