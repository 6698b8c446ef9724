// One optimizer step: draw K micro-batches, count their targets, run the
// scaled forward/backward of each with grad_scale = loss_scale / total, then
// hand over to Amp::step (unscale once, skip if non-finite, clip, update,
// round). The schedule position is the number of applied updates.
// Micro-batch gradients are summed one after another (s = g_0; s += g_1 ...),
// each computed from zero, which is exactly the order data-parallel ranks'
// gradients are summed in (dist::GradReducer): N ranks equal --grad-accum N.
#include "mantissa/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "mantissa/train/checkpoint.hpp"
#include "mantissa/io/untrusted.hpp"
#include "mantissa/train/finite.hpp"

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
  if (options_.group && options_.group->distributed())
    reducer_ = std::make_unique<dist::GradReducer>(*options_.group, amp_.parameters(), options_.comm);
}

void Trainer::accumulate(size_t k, size_t count) {
  const std::vector<nn::Parameter*>& params = amp_.parameters();
  if (accum_.size() != params.size())
    for (const nn::Parameter* p : params) accum_.push_back(Tensor::empty(p->grad.shape(), DType::f32, MemoryKind::gradient));
  for (size_t i = 0; i < params.size(); ++i) {
    float* g = params[i]->grad.f32();
    float* s = accum_[i].f32();
    const int64_t n = params[i]->grad.numel();
    if (k == 0) std::copy(g, g + n, s);
    else {
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t j = 0; j < n; ++j) s[j] += g[j];
    }
    if (k + 1 == count) std::copy(s, s + n, g);
    else std::fill(g, g + n, 0.0f);
  }
}

StepMetrics Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<nn::Batch> micro;
  micro.reserve(static_cast<size_t>(options_.grad_accum));
  int64_t total = 0, tokens = 0;
  const int ranks = reducer_ ? options_.group->size() : 1;
  for (int64_t k = 0; k < options_.grad_accum; ++k) {
    // Every rank draws the whole global batch (same data order everywhere)
    // and counts all its targets: the gradient is normalised as in one process.
    nn::Batch global = train_.next();
    total += amp::count_targets(global);
    tokens += global.targets.numel();
    micro.push_back(ranks > 1 ? dist::rank_rows(global, options_.group->rank(), ranks) : std::move(global));
  }
  StepMetrics m;
  const double lr = options_.schedule.at(amp_.updates());
  if (const auto& q = model_.precision().quantiser) q->set_progress(amp_.updates(), options_.schedule.decay_steps);
  double loss_sum = 0;
  if (options_.fault_hook) options_.fault_hook(step_ + 1, false);
  for (size_t k = 0; k < micro.size(); ++k) {
    loss_sum += amp_.backward(micro[k], total).sum;
    if (micro.size() > 1) accumulate(k, micro.size());
  }
  if (reducer_) {
    const dist::CommStats c = reducer_->reduce(amp_.scaler().scale());
    m.comm_seconds = c.seconds;
    m.comm_bytes = c.bytes_sent;
    std::vector<double> sums(static_cast<size_t>(ranks));
    options_.group->allgather(&loss_sum, sums.data(), sizeof(double), "the loss all-gather");
    loss_sum = 0;
    for (double v : sums) loss_sum += v;  // rank order, as micro-batches add up
  }
  if (options_.fault_hook) options_.fault_hook(step_ + 1, true);
  m.ranks = ranks;
  const amp::AmpStepResult r = amp_.step(lr);
  if (reducer_ && r.skipped) reducer_->reset_feedback();
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
  // Data parallel: rank r evaluates batches r, r + N, ...; the per-batch sums
  // are gathered and added in batch order, as one process adds them.
  const int ranks = reducer_ ? options_.group->size() : 1, rank = reducer_ ? options_.group->rank() : 0;
  const auto n = static_cast<size_t>(val_->num_batches());
  std::vector<nn::LossSum> mine(n);
  for (size_t i = static_cast<size_t>(rank); i < n; i += static_cast<size_t>(ranks))
    mine[i] = model_.evaluate(val_->batch(static_cast<int64_t>(i)));
  std::vector<nn::LossSum> all(n * static_cast<size_t>(ranks));
  if (ranks > 1) options_.group->allgather(mine.data(), all.data(), n * sizeof(nn::LossSum), "the evaluation all-gather");
  else all = mine;
  double sum = 0;
  int64_t count = 0, correct = 0;
  for (size_t i = 0; i < n; ++i) {
    const nn::LossSum& r = all[(i % static_cast<size_t>(ranks)) * n + i];
    sum += r.sum;
    count += r.count;
    correct += r.correct;
  }
  if (count == 0) throw std::invalid_argument("the validation set has no targets");
  e.val_loss = sum / static_cast<double>(count);
  e.val_bpc = e.val_loss / std::log(2.0);
  e.targets = count;
  if (model_.task() == nn::Model::Task::masked_language_model)
    e.masked_accuracy = static_cast<double>(correct) / static_cast<double>(count);
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
  const json j = io::parse_json(text, "trainer_state.json");
  try {
    if (j.at("format") != kStateFormat || j.at("version") != kStateVersion)
      throw std::invalid_argument("trainer_state.json is not a mantissa trainer state of version 1");
    if (j.at("model_kind").get<std::string>() != model_.kind() ||
        io::parse_json(j.at("model_config").get<std::string>(), "trainer_state.json model_config") !=
            json::parse(model_.config_json()))
      throw std::invalid_argument("the checkpoint's model (" + io::excerpt(j.at("model_config").get<std::string>()) +
                                  ") differs from this run's model (" + model_.config_json() + ")");
    const std::string saved_recipe = io::excerpt_json(j.at("recipe"));
    if (j.at("recipe") != json::parse(amp::recipe_to_json(amp_.recipe())))
      throw std::invalid_argument("the checkpoint was trained with recipe " + saved_recipe +
                                  ", this run uses " + amp::recipe_to_json(amp_.recipe()));
    if (j.at("seed").get<uint64_t>() != options_.amp.seed)
      throw std::invalid_argument("the checkpoint was trained with --seed " + io::excerpt_json(j.at("seed")) +
                                  "; resume with the same seed");
    if (j.at("grad_accum").get<int64_t>() != options_.grad_accum)
      throw std::invalid_argument("the checkpoint was trained with --grad-accum " + io::excerpt_json(j.at("grad_accum")));
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

std::string Trainer::non_finite_state() {
  std::vector<std::pair<std::string, Tensor>> all;
  for (const nn::Parameter* p : model_.parameters()) all.emplace_back(p->name, p->value);
  for (const auto& [name, t] : optimizer_.state_tensors()) all.emplace_back("optimizer state " + name, t);
  for (const auto& [name, t] : master_tensors()) all.emplace_back(name, t);
  return first_non_finite(all);
}

std::map<std::string, Tensor> Trainer::master_tensors() {
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
  return extra;
}

void Trainer::save(const std::string& dir) {
  // A diverged model must never replace a good checkpoint. Every rank holds
  // the same state, so every rank checks it (none waits on a rank that threw).
  if (const std::string bad = non_finite_state(); !bad.empty())
    throw std::runtime_error("not saving to " + dir + ": " + bad + " holds non-finite values");
  // Rank 0 writes; the others wait so a relaunch never sees a half-written
  // checkpoint as the latest.
  if (options_.group && options_.group->rank() != 0) {
    options_.group->barrier("the checkpoint barrier");
    return;
  }
  io::save_checkpoint(dir, model_, &optimizer_, state_json(), master_tensors());
  if (options_.group) options_.group->barrier("the checkpoint barrier");
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
  if (const std::string bad = non_finite_state(); !bad.empty())
    throw std::invalid_argument("checkpoint " + dir + ": " + bad + " holds non-finite values (refused)");
}

}  // namespace mantissa::train
