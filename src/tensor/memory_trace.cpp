#include "mantissa/tensor/memory_trace.hpp"

#include <atomic>
#include <map>
#include <mutex>

namespace mantissa {
namespace {
std::atomic<bool> g_on{false};
std::mutex g_mutex;
thread_local std::string t_label;

struct Block {
  uint64_t order = 0;
  size_t bytes = 0;
  std::string label, note;
};
std::map<const void*, Block> g_live;  // traced activation blocks
uint64_t g_order = 0;
size_t g_bytes = 0;
MemoryTrace g_peak;
uint64_t g_peak_order = 0;  // the block whose allocation took the snapshot

void snapshot() {
  std::map<uint64_t, const Block*> by_order;
  for (const auto& kv : g_live) by_order[kv.second.order] = &kv.second;
  g_peak.activation_peak = g_bytes;
  g_peak.at = t_label;
  g_peak.live.clear();
  for (const auto& kv : by_order) g_peak.live.push_back({kv.second->label, kv.second->note, kv.second->bytes});
}
}  // namespace

bool memory_trace_on() { return g_on.load(std::memory_order_relaxed); }

MemoryLabel::MemoryLabel(const std::string& part) {
  if (!memory_trace_on()) return;
  active_ = true;
  outer_length_ = t_label.size();
  if (!t_label.empty()) t_label += '/';
  t_label += part;
}

MemoryLabel::~MemoryLabel() {
  if (active_) t_label.resize(outer_length_);
}

std::string current_memory_label() { return memory_trace_on() ? t_label : std::string(); }

void start_memory_trace() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_live.clear();
  g_bytes = 0;
  g_peak = MemoryTrace();
  t_label.clear();
  g_on.store(true);
}

MemoryTrace stop_memory_trace() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_on.store(false);
  g_live.clear();
  g_bytes = 0;
  return std::move(g_peak);
}

namespace detail {
void trace_alloc(const void* block, size_t bytes, MemoryKind kind) {
  if (!memory_trace_on() || kind != MemoryKind::activation) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_live[block] = Block{g_order++, bytes, t_label, ""};
  g_bytes += bytes;
  if (g_bytes > g_peak.activation_peak) {
    snapshot();
    g_peak_order = g_order - 1;
  }
}

void trace_free(const void* block) {
  if (!memory_trace_on()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_live.find(block);
  if (it == g_live.end()) return;
  g_bytes -= it->second.bytes;
  g_live.erase(it);
}

// Called right after the allocation, before the next one can set a new peak;
// the peak snapshot taken by this block's own allocation gets the note too.
void trace_note(const void* block, const std::string& note) {
  if (!memory_trace_on()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_live.find(block);
  if (it == g_live.end()) return;
  it->second.note = note;
  if (it->second.order == g_peak_order && !g_peak.live.empty()) g_peak.live.back().note = note;
}
}  // namespace detail

}  // namespace mantissa
