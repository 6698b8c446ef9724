#include "mantissa/tensor/memory.hpp"

#include <cstdlib>
#include <mutex>
#include <new>

namespace mantissa {
namespace {
std::mutex g_mutex;
MemoryStats g_stats;
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

void* tracked_alloc(size_t bytes, MemoryKind kind) {
  // Round up so that aligned_alloc's size rule holds and vector loops may
  // read a whole 64-byte line past the last element without faulting.
  size_t padded = (bytes + 63) / 64 * 64 + 64;
  void* p = std::aligned_alloc(64, padded);
  if (!p) throw std::bad_alloc();
  std::lock_guard<std::mutex> lock(g_mutex);
  auto i = static_cast<size_t>(kind);
  g_stats.current[i] += bytes;
  g_stats.current_total += bytes;
  if (g_stats.current[i] > g_stats.peak[i]) g_stats.peak[i] = g_stats.current[i];
  if (g_stats.current_total > g_stats.peak_total) g_stats.peak_total = g_stats.current_total;
  return p;
}

void tracked_free(void* p, size_t bytes, MemoryKind kind) {
  if (!p) return;
  std::free(p);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto i = static_cast<size_t>(kind);
  g_stats.current[i] -= bytes;
  g_stats.current_total -= bytes;
}

}  // namespace mantissa
