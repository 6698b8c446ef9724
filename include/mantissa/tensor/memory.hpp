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

// 64-byte aligned, counted allocation (thread-safe). Freed blocks are kept
// (up to 1 GiB) and handed out again for the same size, so a steady-state
// training step allocates nothing from the system; the counts above are of
// live tensors only, the cache is reported apart.
void* tracked_alloc(size_t bytes, MemoryKind kind);
void tracked_free(void* p, size_t bytes, MemoryKind kind);
size_t cached_memory_bytes();  // held for reuse, not in MemoryStats
void release_cached_memory();  // returns every cached block to the system

}  // namespace mantissa
