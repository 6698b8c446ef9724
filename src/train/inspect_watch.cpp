// `mantissa train --watch`: the inspector's cast-site verdicts on a normal
// run, every k-th step (the probe forwards untouched on the others).
#include "mantissa/train/inspect.hpp"

namespace mantissa::train {

Watch::Watch(nn::Model& model, int64_t every, int64_t max_values, VerdictOptions o, FILE* log)
    : probe_(attach_probe(model, max_values)), every_(every < 1 ? 1 : every), verdicts_(o), log_(log) {}

void Watch::before_step(int64_t step) { probe_->set_active((step - 1) % every_ == 0); }

void Watch::after_step(int64_t step) {
  if (!probe_->active()) return;
  probe_->set_active(false);
  for (const Warning& w : verdicts_.feed(step, probe_->take(), std::nullopt, {}))
    if (log_) std::fprintf(log_, "\nwarning: step %ld: %s: %s\n", static_cast<long>(w.step), w.site.c_str(), w.message.c_str());
}

}  // namespace mantissa::train
