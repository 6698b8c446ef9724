#include "mantissa/nn/module.hpp"

namespace mantissa::nn {

void Module::zero_grad() {
  for (Parameter* p : parameters())
    if (p->grad.defined()) p->grad.zero_();
}

int64_t Module::parameter_count() {
  int64_t n = 0;
  for (Parameter* p : parameters()) n += p->value.numel();
  return n;
}

Parameter* Module::find(const std::string& name) {
  for (Parameter* p : parameters())
    if (p->name == name) return p;
  return nullptr;
}

}  // namespace mantissa::nn
