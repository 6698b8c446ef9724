#include "mantissa/nn/module.hpp"

#include <stdexcept>
#include <string>

namespace mantissa::nn {

void Module::zero_grad() {
  for (Parameter* p : parameters())
    if (p->grad.defined()) p->grad.zero_();
}

void check_dimension(const char* model, const char* name, int64_t v, int64_t max) {
  if (v <= 0 || v > max)
    throw std::invalid_argument(std::string(model) + " config: " + name + " must be in [1, " + std::to_string(max) +
                                "], got " + std::to_string(v));
}

void check_parameter_total(const char* model, int64_t n) {
  if (n > kMaxParameters)
    throw std::invalid_argument(std::string(model) + " config: " + std::to_string(n) + " parameters, more than the " +
                                std::to_string(kMaxParameters) + " mantissa accepts");
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
