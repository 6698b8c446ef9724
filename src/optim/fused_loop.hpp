// The multi-tensor work list shared by the optimizers and gradient clipping:
// every parameter cut into chunks of at most kChunkElems elements, so one
// OpenMP loop over chunks keeps both threads busy across many small tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "mantissa/autograd/parameter.hpp"
#include "mantissa/optim/owned.hpp"

namespace mantissa::optim::detail {

inline constexpr int64_t kChunkElems = kSpanElems;

struct Span {
  uint32_t param;
  int64_t begin, end;
};

// Chunks of each parameter's value, or (of_grads) of its gradient, which a
// bare gradient holder (a loss-scaler test) may have without a value; with
// `owned`, of the owned elements only (chunks counted from each range's start).
inline std::vector<Span> make_spans(const std::vector<autograd::Parameter*>& params, bool of_grads = false,
                                    const OwnedRanges* owned = nullptr) {
  std::vector<Span> spans;
  for (size_t i = 0; i < params.size(); ++i) {
    int64_t n = of_grads ? params[i]->grad.numel() : params[i]->value.numel();
    int64_t first = 0;
    if (owned) {
      first = (*owned)[i].begin;
      n = (*owned)[i].end;
    }
    for (int64_t b = first; b < n; b += kChunkElems)
      spans.push_back({static_cast<uint32_t>(i), b, b + kChunkElems < n ? b + kChunkElems : n});
  }
  return spans;
}

}  // namespace mantissa::optim::detail
