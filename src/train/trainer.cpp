// One optimizer step: draw K micro-batches, count their targets, run the
// scaled forward/backward of each with grad_scale = loss_scale / total, then
// hand over to Amp::step (unscale once, skip if non-finite, clip, update,
// round). The schedule position is the number of applied updates.
// Micro-batch gradients are summed one after another (s = g_0; s += g_1 ...),
// each computed from zero, which is exactly the order data-parallel ranks'
// gradients are summed in (dist::GradReducer): N ranks equal --grad-accum N.
#include "mantissa/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
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
constexpr const char* kFeedbackResidual = "comm.residual";       // [ranks, padded size]
constexpr const char* kFeedbackOwner = "comm.owner_residual";    // [ranks, chunk]

// The error-feedback state a checkpoint keeps, by tensor name.
std::vector<std::pair<const char*, std::vector<float>*>> feedback_parts(dist::GradReducer& r) {
  return {{kFeedbackResidual, &r.residual()}, {kFeedbackOwner, &r.owner_residual()}};
}
}  // namespace

Trainer::Trainer(nn::Model& model, optim::Optimizer& optimizer, data::TrainSource& train,
                 const data::EvalSource* val, const recipe::Recipe& recipe, TrainerOptions options)
    : model_(model),
      optimizer_(optimizer),
      train_(train),
      val_(val),
      options_(options),
      amp_(model, optimizer, recipe, options.amp) {
  if (options_.grad_accum < 1) throw std::invalid_argument("grad_accum must be >= 1");
  options_.schedule.validate();
  if (!options_.group || !options_.group->distributed()) return;
  reducer_ = std::make_unique<dist::GradReducer>(*options_.group, amp_.parameters(), options_.comm,
                                                 options_.shard_optimizer);
  if (!options_.shard_optimizer) return;
  if (optimizer_.parameters() != amp_.parameters())
    throw std::invalid_argument("--shard-optimizer: the optimizer must update exactly the model's parameters");
  try {
    dist::Group* g = options_.group;
    amp_.shard(reducer_->owned(), [g](const std::vector<double>& mine) {
      return dist::ordered_sum(*g, mine, "the gradient-norm all-gather");
    });
    // An optimizer built with this share (train::make_optimizer) keeps its state.
    if (!optimizer_.owned() || *optimizer_.owned() != reducer_->owned()) optimizer_.shard(reducer_->owned());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--shard-optimizer: ") + e.what());
  }
}

void Trainer::accumulate(size_t k, size_t count) {
  const std::vector<autograd::Parameter*>& params = amp_.parameters();
  if (accum_.size() != params.size())
    for (const autograd::Parameter* p : params) accum_.push_back(Tensor::empty(p->grad.shape(), DType::f32, MemoryKind::gradient));
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

std::vector<nn::Batch> Trainer::next_batches() {
  // Every rank draws the whole global batch (same data order everywhere).
  std::vector<nn::Batch> micro;
  micro.reserve(static_cast<size_t>(options_.grad_accum));
  for (int64_t k = 0; k < options_.grad_accum; ++k) micro.push_back(train_.next());
  return micro;
}

StepMetrics Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  return step_on(next_batches(), next_lr(), {}, t0);
}

StepMetrics Trainer::train_step(const std::vector<nn::Batch>& micro, double lr, const std::function<void()>& before_update) {
  return step_on(micro, lr, before_update, std::chrono::steady_clock::now());
}

StepMetrics Trainer::step_on(const std::vector<nn::Batch>& global, double lr, const std::function<void()>& before_update,
                             std::chrono::steady_clock::time_point t0) {
  int64_t total = 0, tokens = 0;
  const int ranks = reducer_ ? options_.group->size() : 1;
  // Each rank counts all targets of the global batches: the gradient is
  // normalised as in one process.
  std::vector<nn::Batch> rows;  // data parallel: this rank's rows of each
  for (const nn::Batch& b : global) {
    total += amp::count_targets(b);
    tokens += b.targets.numel();
    if (ranks > 1) rows.push_back(dist::rank_rows(b, options_.group->rank(), ranks));
  }
  const std::vector<nn::Batch>& micro = ranks > 1 ? rows : global;
  StepMetrics m;
  if (const auto& q = model_.precision().quantiser) q->set_progress(amp_.updates(), options_.schedule.decay_steps);
  double loss_sum = 0;
  if (options_.fault_hook) options_.fault_hook(step_ + 1, false);
  for (size_t k = 0; k < micro.size(); ++k) {
    loss_sum += amp_.backward(micro[k], total).sum;
    if (micro.size() > 1) accumulate(k, micro.size());
  }
  if (reducer_) {
    const double scale = amp_.scaler().scale();
    const dist::CommStats c = sharded() ? reducer_->reduce_scatter(scale) : reducer_->reduce(scale);
    m.comm_seconds = c.seconds;
    m.comm_bytes = c.bytes_sent;
    std::vector<double> sums(static_cast<size_t>(ranks));
    options_.group->allgather(&loss_sum, sums.data(), sizeof(double), "the loss all-gather");
    loss_sum = 0;
    for (double v : sums) loss_sum += v;  // rank order, as micro-batches add up
  }
  if (options_.fault_hook) options_.fault_hook(step_ + 1, true);
  if (before_update) before_update();
  m.ranks = ranks;
  const amp::AmpStepResult r = amp_.step(lr);
  if (reducer_ && r.skipped) reducer_->reset_feedback();
  if (sharded() && !r.skipped) {  // a skipped step changed no weight on any rank
    const dist::CommStats w = reducer_->gather_values();
    m.comm_seconds += w.seconds;
    m.comm_bytes += w.bytes_sent;
  }
  m.state_bytes = state_bytes();
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
            {"recipe", json::parse(recipe::recipe_to_json(amp_.recipe()))},
            {"loss_scaler", json::parse(amp_.scaler().state_json())},
            {"data", json::parse(train_.state_json())},
            {"model_config", model_.config_json()},
            {"model_kind", model_.kind()}};
  if (reducer_ && reducer_->options().error_feedback) j["comm_feedback"] = json::parse(feedback_json());
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
    const json saved_recipe = j.at("recipe"), recipe = json::parse(recipe::recipe_to_json(amp_.recipe()));
    if (saved_recipe != recipe) {
      // Name the first setting that differs, not both whole recipes.
      std::string field;
      for (auto it = recipe.begin(); it != recipe.end() && field.empty(); ++it)
        if (!saved_recipe.is_object() || !saved_recipe.contains(it.key()) || saved_recipe[it.key()] != it.value())
          field = it.key();
      const json saved_field = saved_recipe.is_object() && saved_recipe.contains(field) ? saved_recipe[field] : json();
      throw std::invalid_argument("the checkpoint was trained with recipe " + io::excerpt_json(saved_recipe.value("name", json())) +
                                  ", this run uses " + recipe.at("name").dump() +
                                  (field.empty() ? std::string() : " (" + field + ": checkpoint " + io::excerpt_json(saved_field) +
                                   ", this run " + io::excerpt_json(recipe.at(field)) + ")"));
    }
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

int64_t Trainer::state_bytes() const {
  size_t b = amp_.master_weights().bytes();
  for (const auto& [name, t] : optimizer_.state_tensors()) b += t.bytes();
  return static_cast<int64_t>(b);
}

namespace {

constexpr size_t kVerdictBytes = 240;

// The optimizer as a checkpoint sees it: on save, the whole state tensors
// it is given (gathered when sharded); on load, the whole tensors cut to the
// owned elements before the optimizer checks and takes them, so a
// checkpoint from any number of ranks resumes on any other.
class WholeState final : public optim::Optimizer {
 public:
  WholeState(optim::Optimizer& inner, std::map<std::string, Tensor> whole)
      : Optimizer(inner.parameters()), inner_(inner), whole_(std::move(whole)) {}
  void step(double) override { throw std::logic_error("WholeState only carries state"); }
  std::string type() const override { return inner_.type(); }
  std::map<std::string, Tensor> state_tensors() const override { return whole_; }
  std::string state_json() const override { return inner_.state_json(); }
  void load_state(const std::map<std::string, Tensor>& tensors, const std::string& json) override {
    const optim::OwnedRanges* owned = inner_.owned();
    if (!owned) return inner_.load_state(tensors, json);
    std::map<std::string, Tensor> mine;
    for (const auto& [key, t] : tensors) {
      // "<parameter name>.<state name>"; anything else goes on to the
      // optimizer's own checks, which name it.
      const auto dot = key.rfind('.');
      size_t i = params_.size();
      for (size_t k = 0; dot != std::string::npos && k < params_.size(); ++k)
        if (key.compare(0, dot, params_[k]->name) == 0 && params_[k]->name.size() == dot) i = k;
      if (i == params_.size() || t.dtype() != DType::f32 || t.shape() != params_[i]->value.shape()) {
        mine.emplace(key, t);
        continue;
      }
      const optim::Owned& o = (*owned)[i];
      Tensor cut = Tensor::empty({o.size()}, DType::f32, MemoryKind::optimizer_state);
      if (o.size() > 0) std::memcpy(cut.raw(), t.f32() + o.begin, cut.bytes());
      mine.emplace(key, cut);
    }
    inner_.load_state(mine, json);
  }

 private:
  optim::Optimizer& inner_;
  std::map<std::string, Tensor> whole_;
};

}  // namespace

std::string Trainer::non_finite_state() {
  std::vector<std::pair<std::string, Tensor>> all;
  for (const autograd::Parameter* p : model_.parameters()) all.emplace_back(p->name, p->value);
  for (const auto& [name, t] : optimizer_.state_tensors()) all.emplace_back("optimizer state " + name, t);
  for (const auto& [name, t] : amp_.master_weights().master_tensors()) all.emplace_back(kMasterPrefix + name, t);
  const std::string bad = first_non_finite(all);
  if (!sharded()) return bad;
  // Each rank checked its own chunk of the state: all must reach one verdict.
  std::vector<char> mine(kVerdictBytes, 0), every(kVerdictBytes * static_cast<size_t>(options_.group->size()));
  std::copy_n(bad.begin(), std::min(bad.size(), kVerdictBytes - 1), mine.begin());
  options_.group->allgather(mine.data(), every.data(), kVerdictBytes, "the finiteness all-gather");
  for (int r = 0; r < options_.group->size(); ++r)
    if (every[static_cast<size_t>(r) * kVerdictBytes] != 0)
      return std::string(&every[static_cast<size_t>(r) * kVerdictBytes]) + " (on rank " + std::to_string(r) + ")";
  return {};
}

std::map<std::string, Tensor> Trainer::whole_optimizer_state() {
  std::map<std::string, Tensor> mine = optimizer_.state_tensors();
  if (!sharded()) return mine;
  // One all-gather per kind of state ("exp_avg", ...) over every parameter.
  const std::vector<autograd::Parameter*>& params = amp_.parameters();
  std::set<std::string> kinds;
  for (const auto& [key, t] : mine) kinds.insert(key.substr(key.rfind('.') + 1));
  std::map<std::string, Tensor> whole;
  for (const std::string& kind : kinds) {
    std::vector<const float*> from(params.size());
    std::vector<float*> to(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string key = params[i]->name + "." + kind;
      const auto it = mine.find(key);
      if (it == mine.end() || it->second.dtype() != DType::f32)
        throw std::logic_error("sharded optimizer state " + key + " is missing or not fp32");
      Tensor t = Tensor::empty(params[i]->value.shape(), DType::f32, MemoryKind::optimizer_state);
      from[i] = it->second.f32();
      to[i] = t.f32();
      whole.emplace(key, t);
    }
    reducer_->gather(from, to, "the optimizer-state all-gather");
  }
  return whole;
}

std::map<std::string, Tensor> Trainer::master_tensors() {
  std::map<std::string, Tensor> extra;
  // Master copies (when the recipe keeps them) are saved beside the working
  // weights: the model file holds what the model computes with.
  const std::map<std::string, Tensor> mine = amp_.master_weights().master_tensors();
  if (mine.empty()) return extra;
  const std::vector<autograd::Parameter*>& params = amp_.parameters();
  std::vector<const float*> from(params.size(), nullptr);
  std::vector<float*> to(params.size(), nullptr);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto it = mine.find(params[i]->name);
    if (it == mine.end()) continue;  // no master (a norm kept in fp32)
    if (!sharded()) {
      extra[kMasterPrefix + params[i]->name] = it->second;
      continue;
    }
    Tensor t = Tensor::empty(params[i]->value.shape(), DType::f32, MemoryKind::workspace);
    from[i] = it->second.f32();
    to[i] = t.f32();
    extra[kMasterPrefix + params[i]->name] = t;
  }
  if (sharded()) reducer_->gather(from, to, "the master-weight all-gather");
  return extra;
}

std::string Trainer::feedback_json() const {
  const dist::CommOptions& o = reducer_->options();
  return json{{"ranks", options_.group->size()},
              {"format", dist::wire_format_name(dist::parse_wire_format(o.format))},
              {"block", o.block},
              {"sharded", reducer_->sharded()},
              {"padded", reducer_->padded_size()},
              {"scale", reducer_->residual_scale()}}
      .dump();
}

void Trainer::add_feedback_tensors(std::map<std::string, Tensor>& extra) {
  if (!reducer_ || !reducer_->options().error_feedback) return;
  // Per rank: the residual of its whole vector and of its owned sum.
  const auto ranks = options_.group->size();
  for (const auto& [name, v] : feedback_parts(*reducer_)) {
    Tensor t = Tensor::empty({ranks, static_cast<int64_t>(v->size())}, DType::f32, MemoryKind::workspace);
    options_.group->allgather(v->data(), t.f32(), v->size() * sizeof(float), "the error-feedback all-gather");
    extra[name] = t;
  }
}

void Trainer::restore_feedback(const std::map<std::string, Tensor>& extra, const std::string& state_text) {
  const bool saved = extra.count(kFeedbackResidual) != 0;
  const bool wanted = reducer_ && reducer_->options().error_feedback;
  const bool speak = !options_.group || options_.group->rank() == 0;
  if (!wanted) {
    if (saved && speak)
      std::fprintf(stderr, "mantissa: note: the checkpoint's error-feedback residuals are not used by this run\n");
    return;
  }
  const json state = io::parse_json(state_text, "trainer_state.json");
  const json now = json::parse(feedback_json());
  std::string why;
  if (!saved || !state.contains("comm_feedback")) why = "the checkpoint holds none";
  else {
    json then = state.at("comm_feedback");
    for (const char* key : {"ranks", "format", "block", "sharded", "padded"})
      if (!then.contains(key) || then.at(key) != now.at(key))
        why = std::string("they were saved with a different ") + key + " (" + io::excerpt_json(then.value(key, json())) +
              ", this run " + now.at(key).dump() + ")";
  }
  const int rank = options_.group->rank();
  for (const auto& [name, v] : feedback_parts(*reducer_)) {
    if (!why.empty()) break;
    const auto it = extra.find(name);
    const auto n = static_cast<int64_t>(v->size());
    if (it == extra.end() || it->second.dtype() != DType::f32 ||
        it->second.shape() != Shape{options_.group->size(), n}) {
      why = std::string("tensor ") + name + " has the wrong shape";
      break;
    }
    std::copy_n(it->second.f32() + rank * n, n, v->begin());
  }
  if (why.empty()) {
    reducer_->set_residual_scale(state.at("comm_feedback").at("scale").get<double>());
    return;
  }
  reducer_->reset_feedback();
  if (speak) std::fprintf(stderr, "mantissa: note: error-feedback residuals start from zero: %s\n", why.c_str());
}

void Trainer::save(const std::string& dir) {
  // A diverged model must never replace a good checkpoint. Every rank takes
  // the same verdict (none waits on a rank that threw).
  if (const std::string bad = non_finite_state(); !bad.empty())
    throw std::runtime_error("not saving to " + dir + ": " + bad + " holds non-finite values");
  // Collective: every rank gives its chunk of the state and its residuals.
  WholeState whole(optimizer_, whole_optimizer_state());
  std::map<std::string, Tensor> extra = master_tensors();
  add_feedback_tensors(extra);
  // Rank 0 writes; the others wait so a relaunch never sees a half-written
  // checkpoint as the latest.
  if (options_.group && options_.group->rank() != 0) {
    options_.group->barrier("the checkpoint barrier");
    return;
  }
  train::save_checkpoint(dir, model_, &whole, state_json(), extra);
  if (options_.group) options_.group->barrier("the checkpoint barrier");
}

void Trainer::resume(const std::string& dir) {
  WholeState whole(optimizer_, {});
  train::CheckpointData data = train::load_checkpoint(dir, model_, &whole);
  load_state_json(data.trainer_state);
  const auto masters = amp_.master_weights().masters();
  for (const auto& [name, ptr] : masters) {
    const auto it = data.extra_tensors.find(kMasterPrefix + name);
    if (it == data.extra_tensors.end())
      throw std::invalid_argument("checkpoint " + dir + " lacks the master copy of " + name);
    const Tensor& t = it->second;
    const autograd::Parameter* p = nullptr;
    for (autograd::Parameter* q : amp_.parameters())
      if (q->name == name) p = q;
    if (t.dtype() != DType::f32 || !p || t.shape() != p->value.shape())
      throw std::invalid_argument("checkpoint " + dir + ": master copy of " + name + " is " + dtype_name(t.dtype()) +
                                  " " + shape_str(t.shape()) + " but f32 " +
                                  (p ? shape_str(p->value.shape()) : std::string("?")) + " is expected");
    amp_.master_weights().load_master(name, t.f32(), t.numel());
  }
  restore_feedback(data.extra_tensors, data.trainer_state);
  for (autograd::Parameter* p : amp_.parameters()) ++p->version;  // cached casts must refresh
  model_.zero_grad();
  if (const std::string bad = non_finite_state(); !bad.empty())
    throw std::invalid_argument("checkpoint " + dir + ": " + bad + " holds non-finite values (refused)");
}

}  // namespace mantissa::train
