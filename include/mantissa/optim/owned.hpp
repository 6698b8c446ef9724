// The part of each parameter one process updates when the optimizer state is
// sharded across data-parallel ranks (ZeRO stage 1): elements [begin, end)
// of the parameter's flattened value, possibly empty. Unsharded, a process
// owns [0, numel) of every parameter.
#pragma once

#include <cstdint>
#include <vector>

namespace mantissa::optim {

struct Owned {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Owned&) const = default;
};
// One entry per parameter, in the optimizer's parameter order.
using OwnedRanges = std::vector<Owned>;

// The optimizers and the gradient norm work on each parameter in chunks of
// this many elements (the norm adds one fp64 partial sum per chunk, in chunk
// order). A shard that starts and ends on chunk boundaries (or parameter
// ends) therefore sees exactly the chunks one process sees.
inline constexpr int64_t kSpanElems = int64_t{1} << 14;

}  // namespace mantissa::optim
