// Memory accounting: every tensor allocation is counted under a kind, with
// current and peak bytes, so the trainer and benchmarks can report them.
#pragma once

#include <array>
#include <cstddef>

namespace mantissa {

enum class MemoryKind : int { activation, parameter, gradient, optimizer_state, workspace, count };
const char* memory_kind_name(MemoryKind k);

struct MemoryStats {
  std::array<size_t, static_cast<size_t>(MemoryKind::count)> current{};
  std::array<size_t, static_cast<size_t>(MemoryKind::count)> peak{};
  size_t current_total = 0;
  size_t peak_total = 0;
  size_t of(MemoryKind k) const { return current[static_cast<size_t>(k)]; }
  size_t peak_of(MemoryKind k) const { return peak[static_cast<size_t>(k)]; }
};

MemoryStats memory_stats();
void reset_peak_memory();  // peaks restart from the current values

// 64-byte aligned, counted allocation (thread-safe).
void* tracked_alloc(size_t bytes, MemoryKind kind);
void tracked_free(void* p, size_t bytes, MemoryKind kind);

}  // namespace mantissa
