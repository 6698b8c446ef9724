// `mantissa train --watch`: the inspector's cast-site verdicts on a normal
// run, every k-th step (the probe forwards untouched on the others).
#include "mantissa/inspect/inspect.hpp"
#include "mantissa/optim/independent_decay.hpp"

namespace mantissa::inspect {

optim::Adam* low_precision_adam(optim::Optimizer* opt) {
  if (auto* d = dynamic_cast<optim::IndependentDecay*>(opt)) opt = &d->inner();
  auto* adam = dynamic_cast<optim::Adam*>(opt);
  return adam && !adam->state_format().is_fp32() ? adam : nullptr;
}

Watch::Watch(nn::Model& model, int64_t every, int64_t max_values, VerdictOptions o, FILE* log, optim::Optimizer* opt)
    : probe_(attach_probe(model, max_values)), adam_(low_precision_adam(opt)), every_(every < 1 ? 1 : every),
      verdicts_(o), log_(log) {}

void Watch::before_step(int64_t step) {
  probe_->set_active((step - 1) % every_ == 0);
  if (adam_ && probe_->active())
    adam_->set_state_observer([probe = probe_.get()](const optim::Adam::StateCast& c) { probe->tally_state(c); },
                              probe_->max_values());
}

void Watch::after_step(int64_t step) {
  if (adam_) adam_->set_state_observer({});
  if (!probe_->active()) return;
  probe_->set_active(false);
  for (const Warning& w : verdicts_.feed(step, probe_->take(), std::nullopt, {}))
    if (log_) std::fprintf(log_, "\nwarning: step %ld: %s: %s\n", static_cast<long>(w.step), w.site.c_str(), w.message.c_str());
}

}  // namespace mantissa::inspect
