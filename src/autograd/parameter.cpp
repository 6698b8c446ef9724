// The names of parameter roles, for messages and reports.
#include "mantissa/autograd/parameter.hpp"

namespace mantissa::autograd {

const char* role_name(Role r) {
  switch (r) {
    case Role::token_embedding: return "token_embedding";
    case Role::position_embedding: return "position_embedding";
    case Role::weight: return "weight";
    case Role::bias: return "bias";
    case Role::norm_gain: return "norm_gain";
    case Role::norm_bias: return "norm_bias";
    case Role::readout: return "readout";
  }
  return "?";
}

}  // namespace mantissa::autograd
