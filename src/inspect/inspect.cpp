// `mantissa inspect`: the run under its recipe and, on the same batches, an
// fp32 shadow of the same model (the recipe's parametrisation, fp32
// everywhere) from the same weights, re-synchronised to the run's weights
// every K steps (K = 0: free-running from step 1). Per sampled step: every
// cast site's figures (Probe), per parameter the gradient and update against
// the shadow's, and the loss gap; the verdicts watch them as they come.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "mantissa/formats/format.hpp"
#include "mantissa/inspect/inspect.hpp"
#include "mantissa/train/session.hpp"

namespace mantissa::inspect {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The shadow's configuration: same model, data, optimizer and schedule; fp32
// in every role; the unit model's own settings (--set unit.*) kept.
train::TrainConfig shadow_config(const train::TrainConfig& c, const recipe::Recipe& r) {
  train::TrainConfig s = c;
  s.recipe = r.parametrisation == recipe::Parametrisation::umup ? "umup-fp32"
             : r.parametrisation == recipe::Parametrisation::unit ? "unit-fp32"
                                                               : "fp32";
  s.opt_level.clear();
  s.loss_scale.clear();
  s.init_scale = 0;
  s.growth_interval = 0;
  s.growth_factor = 0;
  s.backoff_factor = 0;
  s.min_scale = -1;
  s.max_scale = -1;
  s.weight_rounding.clear();
  s.grad_stats = false;
  s.resume.clear();
  s.set.clear();
  for (const std::string& kv : c.set)
    if (kv.rfind("unit.", 0) == 0) s.set.push_back(kv);
  return s;
}

std::vector<float> copy_of(const Tensor& t) {
  const Tensor f = t.dtype() == DType::f32 ? t : t.to(DType::f32, MemoryKind::workspace);
  return std::vector<float>(f.f32(), f.f32() + f.numel());
}

// Cosine and relative norm error of a against the reference b; NaN when b is 0.
std::pair<double, double> compare(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0, dd = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    ab += x * y;
    aa += x * x;
    bb += y * y;
    dd += (x - y) * (x - y);
  }
  if (!(bb > 0)) return {std::nan(""), std::nan("")};
  return {aa > 0 ? ab / std::sqrt(aa * bb) : 0.0, std::sqrt(dd / bb)};
}

void sync(const std::vector<autograd::Parameter*>& from, const std::vector<autograd::Parameter*>& to) {
  for (size_t i = 0; i < from.size(); ++i) {
    const std::vector<float> v = copy_of(from[i]->value);
    std::copy(v.begin(), v.end(), to[i]->value.f32());
    ++to[i]->version;
  }
}

// The settings of a training run that inspect has no use for (it trains
// without evaluating, logging or saving): f(flag, value, default) for each.
template <class Config, class F>
void for_unused_settings(Config& c, F f) {
  const train::TrainConfig d;
  f("--save", c.save, d.save);
  f("--save-every", c.save_every, d.save_every);
  f("--metrics", c.metrics, d.metrics);
  f("--eval-every", c.eval_every, d.eval_every);
  f("--eval-batches", c.eval_batches, d.eval_batches);
  f("--log-every", c.log_every, d.log_every);
  f("--stop-after", c.stop_after, d.stop_after);
}

}  // namespace

train::TrainConfig without_unused_settings(train::TrainConfig c) {
  for_unused_settings(c, [](const char*, auto& value, const auto& fallback) { value = fallback; });
  return c;
}

InspectResult inspect(const InspectOptions& o) {
  if (o.sync_every < 0) throw std::invalid_argument("--sync-every must be >= 0 (0: free-running)");
  if (o.sample_every < 1) throw std::invalid_argument("--sample-every must be >= 1");
  if (o.config.steps < 1) throw std::invalid_argument("--steps must be >= 1");
  if (!o.config.resume.empty()) throw std::invalid_argument("inspect starts from initialisation: --resume is not supported");
  for_unused_settings(o.config, [](const char* flag, const auto& value, const auto& fallback) {
    if (value != fallback)
      throw std::invalid_argument(std::string("inspect does not use ") + flag +
                                  " (it writes its tables and figures into --out; use `mantissa train` for that)");
  });
  o.verdicts.validate();
  if (!o.out.empty()) prepare_out_dir(o.out);

  auto run = train::build_session(o.config);
  auto shadow = train::build_session(shadow_config(run->config, run->recipe));
  const std::vector<autograd::Parameter*> rp = run->trainer->amp().parameters(), sp = shadow->trainer->amp().parameters();
  if (rp.size() != sp.size()) throw std::logic_error("inspect: the shadow model has other parameters");
  for (size_t i = 0; i < rp.size(); ++i)
    if (rp[i]->name != sp[i]->name || rp[i]->value.shape() != sp[i]->value.shape() || sp[i]->value.dtype() != DType::f32)
      throw std::logic_error("inspect: shadow parameter " + sp[i]->name + " does not match " + rp[i]->name);

  train::Trainer& rt = *run->trainer;
  train::Trainer& st = *shadow->trainer;
  const recipe::Recipe& recipe = run->recipe;
  const formats::Format& grad_format = recipe.gradient_format.value();
  const bool low_grads = recipe::exact_dtype(grad_format) != DType::f32;
  std::shared_ptr<Probe> probe = attach_probe(*run->model, o.max_values);
  optim::Adam* adam = low_precision_adam(run->optimizer.get());
  Verdicts verdicts(o.verdicts);

  InspectResult res;
  res.recipe = recipe.name;
  res.shadow_recipe = shadow->recipe.name;
  double run_time = 0, shadow_time = 0;
  constexpr int kPrinted = 12;  // warnings on the terminal; all of them go to warnings.txt
  int printed = 0;
  sync(rp, sp);
  for (int64_t step = 1; step <= o.config.steps; ++step) {
    StepRecord rec;
    rec.step = step;
    rec.sampled = (step - 1) % o.sample_every == 0;
    if (o.sync_every > 0 && step > 1 && (step - 1) % o.sync_every == 0) sync(rp, sp);
    // The run's batches and rate: the shadow trains on both (its own
    // schedule would run ahead of the run's after a skipped step).
    const std::vector<nn::Batch> micro = rt.next_batches();
    const double lr = rt.next_lr();

    // The run, probed on sampled steps: its gradients as the update sees
    // them and its weights before the update.
    std::vector<std::vector<float>> rg, rv;
    auto record_run = [&] {
      if (!rec.sampled) return;
      if (low_grads) probe->tally_gradients(rp, grad_format, rt.amp().scaler().scale());
      for (autograd::Parameter* p : rp) {
        rg.push_back(rt.amp().step_gradient(*p));
        rv.push_back(copy_of(p->value));
      }
    };
    auto t0 = Clock::now();
    probe->set_active(rec.sampled);
    if (adam && rec.sampled)
      adam->set_state_observer([&probe](const optim::Adam::StateCast& c) { probe->tally_state(c); }, o.max_values);
    const train::StepMetrics r = rt.train_step(micro, lr, record_run);
    if (adam) adam->set_state_observer({});
    const amp::MasterWeights& mw = rt.amp().master_weights();
    if (rec.sampled && mw.active() && mw.has_master()) probe->tally_weights(rp, mw.masters(), mw.working_format());
    probe->set_active(false);
    rec.seconds = since(t0);
    rec.skipped = r.skipped;
    rec.loss = r.loss;
    if (rec.sampled) rec.sites = probe->take();

    // The shadow on the same batches.
    std::vector<std::vector<float>> sg, sv;
    auto record_shadow = [&] {
      if (!rec.sampled) return;
      for (autograd::Parameter* p : sp) {
        sg.push_back(copy_of(p->grad));
        sv.push_back(copy_of(p->value));
      }
    };
    t0 = Clock::now();
    rec.shadow_loss = st.train_step(micro, lr, record_shadow).loss;
    rec.shadow_seconds = since(t0);
    run_time += rec.seconds;
    shadow_time += rec.shadow_seconds;

    if (rec.sampled) {
      for (size_t i = 0; i < rp.size(); ++i) {
        ParamCompare c;
        c.name = rp[i]->name;
        std::tie(c.grad_cos, c.grad_rel_err) = compare(rg[i], sg[i]);
        const std::vector<float> ra1 = copy_of(rp[i]->value), sa1 = copy_of(sp[i]->value);
        for (size_t j = 0; j < ra1.size(); ++j) {
          rv[i][j] = ra1[j] - rv[i][j];
          sv[i][j] = sa1[j] - sv[i][j];
        }
        if (r.skipped) c.update_cos = c.update_rel_err = std::nan("");  // no update to compare
        else std::tie(c.update_cos, c.update_rel_err) = compare(rv[i], sv[i]);
        rec.params.push_back(std::move(c));
      }
      const std::optional<double> gap =
          std::isfinite(rec.loss) && rec.shadow_loss > 0 ? std::optional<double>((rec.loss - rec.shadow_loss) / rec.shadow_loss)
                                                         : std::nullopt;
      for (const Warning& w : verdicts.feed(step, rec.sites, gap, rec.params)) {
        if (o.print && ++printed <= kPrinted)
          std::printf("step %ld: warning: %s: %s\n", static_cast<long>(w.step), w.site.c_str(), w.message.c_str());
        if (o.print && printed == kPrinted) std::printf("(further warnings only in warnings.txt)\n");
      }
      if (o.print) std::fflush(stdout);
    }
    res.steps.push_back(std::move(rec));
  }
  res.ranking = verdicts.ranking();
  res.warnings = verdicts.warnings();
  res.step_seconds = run_time / static_cast<double>(o.config.steps);
  res.shadow_step_seconds = shadow_time / static_cast<double>(o.config.steps);
  if (!o.out.empty()) write_inspection(o.out, res);
  return res;
}

}  // namespace mantissa::inspect
