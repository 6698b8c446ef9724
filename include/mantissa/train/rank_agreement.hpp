// Data-parallel ranks must train one model: at start-up every rank compares
// its settings, model configuration and recipe with every other's, so ranks
// launched with different flags stop with a message naming the setting
// instead of training different replicas or timing out in a collective.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mantissa/dist/group.hpp"

namespace mantissa::train {

// parts: {name, canonical text} in the same order on every rank (the names
// are what a message quotes: "--seed", "the model configuration"). Throws
// std::invalid_argument "data-parallel ranks disagree on <name> (rank r ...)"
// naming the first part whose text differs from rank 0's. One process: no-op.
void require_rank_agreement(dist::Group& group, const std::vector<std::pair<std::string, std::string>>& parts);

}  // namespace mantissa::train
