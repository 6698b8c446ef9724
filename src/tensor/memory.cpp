#include "mantissa/tensor/memory.hpp"

#include "mantissa/tensor/memory_trace.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace mantissa {
namespace {
std::mutex g_mutex;
MemoryStats g_stats;

// Freed blocks kept for reuse, keyed by their padded size. A training step
// allocates the same sizes every step, so after the first step every tensor
// comes from here: no malloc/free of multi-megabyte blocks, no page faults and
// no kernel zeroing of fresh pages. Bounded; under AddressSanitizer it is off
// so that use-after-free of a tensor buffer is still caught.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kCacheLimit = 0;
#else
constexpr size_t kCacheLimit = size_t{1} << 30;
#endif
// Never destroyed: tensors in static storage may be freed after main returns.
std::unordered_map<size_t, std::vector<void*>>& free_blocks() {
  static auto* blocks = new std::unordered_map<size_t, std::vector<void*>>();
  return *blocks;
}
size_t g_cached_bytes = 0;

size_t padded_size(size_t bytes) {
  // Round up so that aligned_alloc's size rule holds and vector loops may
  // read a whole 64-byte line past the last element without faulting.
  // The allocator cannot serve more than 2^62 bytes anyway; refusing here
  // keeps the rounding below from wrapping.
  if (bytes > (size_t{1} << 62))
    throw std::invalid_argument("allocation of " + std::to_string(bytes) + " bytes is beyond any machine");
  return (bytes + 63) / 64 * 64 + 64;
}

void count_alloc(size_t bytes, MemoryKind kind) {
  auto i = static_cast<size_t>(kind);
  g_stats.current[i] += bytes;
  g_stats.current_total += bytes;
  if (g_stats.current[i] > g_stats.peak[i]) g_stats.peak[i] = g_stats.current[i];
  if (g_stats.current_total > g_stats.peak_total) g_stats.peak_total = g_stats.current_total;
}
}  // namespace

const char* memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::activation: return "activation";
    case MemoryKind::parameter: return "parameter";
    case MemoryKind::gradient: return "gradient";
    case MemoryKind::optimizer_state: return "optimizer_state";
    case MemoryKind::workspace: return "workspace";
    default: return "?";
  }
}

MemoryStats memory_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats;
}

void reset_peak_memory() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_stats.peak = g_stats.current;
  g_stats.peak_total = g_stats.current_total;
}

static void* untraced_alloc(size_t bytes, MemoryKind kind) {
  const size_t padded = padded_size(bytes);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = free_blocks().find(padded);
    if (it != free_blocks().end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      g_cached_bytes -= padded;
      count_alloc(bytes, kind);
      return p;
    }
  }
  void* p = std::aligned_alloc(64, padded);
  if (!p) {
    release_cached_memory();  // give the cache back and try once more
    p = std::aligned_alloc(64, padded);
    if (!p) throw std::bad_alloc();
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  count_alloc(bytes, kind);
  return p;
}

void* tracked_alloc(size_t bytes, MemoryKind kind) {
  void* p = untraced_alloc(bytes, kind);
  detail::trace_alloc(p, bytes, kind);
  return p;
}

void tracked_free(void* p, size_t bytes, MemoryKind kind) {
  if (!p) return;
  detail::trace_free(p);
  const size_t padded = padded_size(bytes);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto i = static_cast<size_t>(kind);
  g_stats.current[i] -= bytes;
  g_stats.current_total -= bytes;
  if (g_cached_bytes + padded <= kCacheLimit) {
    // Called from destructors (noexcept): when the cache's own bookkeeping
    // cannot grow (out of memory), the block is freed instead of cached.
    try {
      free_blocks()[padded].push_back(p);
      g_cached_bytes += padded;
      return;
    } catch (const std::bad_alloc&) {
    }
  }
  std::free(p);
}

size_t cached_memory_bytes() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_cached_bytes;
}

void release_cached_memory() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& kv : free_blocks())
    for (void* p : kv.second) std::free(p);
  free_blocks().clear();
  g_cached_bytes = 0;
}

}  // namespace mantissa
