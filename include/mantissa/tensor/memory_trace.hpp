// Allocation trace: which live tensors make up the activation peak, each with
// the label of the code that allocated it (model op, saved copy, backward).
// A diagnostic (bench_train --memory-trace); when off it costs one relaxed
// atomic load per allocation and per label scope.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mantissa/tensor/memory.hpp"

namespace mantissa {

bool memory_trace_on();

// Labels the allocations made on this thread while it is alive; nested
// labels are joined with '/'. Does nothing when the trace is off. The trace
// is started and stopped outside any label (on the thread that runs the step).
class MemoryLabel {
 public:
  explicit MemoryLabel(const std::string& part);
  ~MemoryLabel();
  MemoryLabel(const MemoryLabel&) = delete;
  MemoryLabel& operator=(const MemoryLabel&) = delete;

 private:
  bool active_ = false;
  size_t outer_length_ = 0;  // the enclosing label's length, restored on exit
};
std::string current_memory_label();  // "" when the trace is off

struct TracedBlock {
  std::string label;  // scope labels at allocation
  std::string note;   // what was allocated (dtype and shape)
  size_t bytes = 0;
};
struct MemoryTrace {
  size_t activation_peak = 0;  // bytes of activation blocks allocated since the start, at their peak
  std::string at;              // the label active when the peak was reached
  std::vector<TracedBlock> live;  // those blocks, allocation order
};

// Starts recording activation blocks allocated from now on (earlier ones are
// not part of the trace); stop returns the blocks live at their peak.
void start_memory_trace();
MemoryTrace stop_memory_trace();

namespace detail {
void trace_alloc(const void* block, size_t bytes, MemoryKind kind);
void trace_free(const void* block);
void trace_note(const void* block, const std::string& note);
}  // namespace detail

}  // namespace mantissa
